#!/bin/sh
# A 3-instance Kubernetes rollout by poolctl against the floor: the very same rollout by a
# minimal client inside the test (bare bollard and kube-rs calls, every wait a watch), in turns
# on fresh worlds, against real Docker and the fake API server; also each one's wall time over
# the waits in the event logs. Needs a Docker daemon. See BENCHMARKS.md, "Kubernetes rollout
# overhead".
#   POOLCTL_BENCH_BIN=target/release/poolctl  time that binary (default: the test build, debug)
#   POOLCTL_BENCH_TURNS=5                      turns of each (default 3)
#   POOLCTL_BENCH_TRACE=1                      print the first turns' timelines (Docker events,
#                                              API requests, the fake's events)
set -eu
cd "$(dirname "$0")/.."
exec cargo test --test main -- --ignored --exact bench_rollout::bench_rollout_overhead --nocapture "$@"
