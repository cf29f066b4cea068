#!/bin/sh
# Wall time of a 3-instance Kubernetes rollout against the sum of its unavoidable waits
# (container start, Node Ready, eviction, container stop), against real Docker and the fake
# API server. Needs a Docker daemon. See BENCHMARKS.md, "Kubernetes rollout overhead".
set -eu
cd "$(dirname "$0")/.."
exec cargo test --test main -- --ignored --exact e2e_kube::bench_rollout_overhead --nocapture "$@"
