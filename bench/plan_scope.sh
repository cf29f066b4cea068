#!/bin/sh
# `poolctl plan` of a 10-Node pool in a cluster of 10 Nodes and 100 pods, then in the same
# cluster grown to 1,000 Nodes and 100,000 pods (real Docker, the fake API server): the
# requests, the bytes read and the median wall time of each, and their ratio. Needs a Docker
# daemon. See BENCHMARKS.md, "Kubernetes lists".
set -eu
cd "$(dirname "$0")/.."
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
cargo test --test main -- --ignored --exact scope::bench_plan_in_a_small_and_a_large_cluster --nocapture "$@"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
