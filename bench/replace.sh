#!/usr/bin/env bash
# Replacing 10 containers whose PID 1 ignores SIGTERM (a bare `sleep`: every stop spends the
# whole grace period), grace 10s, side by side with `docker-compose up -d` of the same
# containers. Prints, each measured in this one run:
#   - poolctl's wall time for the replacement (maxSurge 10) over compose's (target <= 1.1);
#   - the fewest containers running at any sample during each (poolctl must never drop below
#     10; compose stops everything first);
#   - poolctl's wall time over the safe limit: the time to create 10 fresh containers plus one
#     grace period (nothing can do better without dropping below 10 running).
# Needs a Docker daemon, docker-compose and the local image poolctl-busybox:latest (built by
# scripts/build-busybox-image when missing). Removes every container it created on exit.
# Usage: bench/replace.sh [runs]   (default 1; each run measures both tools)
set -euo pipefail
runs=${1:-1}
grace=10
replicas=10

command -v docker-compose >/dev/null || { echo "docker-compose is not installed" >&2; exit 1; }
sampler=""
bench_cleanup() { [[ -z $sampler ]] || kill "$sampler" 2>/dev/null || true; }
BENCH_NAME=replace
source "$(dirname "$0")/lib.sh"

echo "machine: $(nproc) cores, $(uname -sr), $(docker-compose version --short 2>/dev/null || echo compose)"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

# sample LABEL_FILTER OUT: count the running containers that carry the filter label every
# 100 ms into OUT, one count a line, until killed.
sample() {
  while :; do
    docker ps -q --filter "label=$1" --filter status=running | wc -l >>"$2"
    sleep 0.1
  done
}
start_sampling() {
  : >"$2"
  sample "$1" "$2" &
  sampler=$!
}
stop_sampling() {
  kill "$sampler" 2>/dev/null || true
  wait "$sampler" 2>/dev/null || true
  sampler=""
  sort -n "$1" | head -1
}

write_pool() { # DIR NAME REVISION
  mkdir -p "$1"
  cat >"$1/pool.yaml" <<YAML
apiVersion: poolctl.dev/v1alpha1
kind: Pool
metadata:
  name: $2
spec:
  replicas: $replicas
  template:
    image: poolctl-busybox:latest
    command: ["sleep", "3600"]
    env:
      REVISION: "$3"
    labels:
      $run_label: $run_id
  rollout:
    maxSurge: $replicas
    maxUnavailable: 0
    stopGracePeriod: ${grace}s
    # The references do not watch a new container stay up; neither does poolctl here.
    monitor: 0s
YAML
}

write_compose() { # REVISION
  mkdir -p "$tmp/compose"
  cat >"$tmp/compose/docker-compose.yml" <<YAML
version: "2.4"
services:
  app:
    image: poolctl-busybox:latest
    command: ["sleep", "3600"]
    environment:
      REVISION: "$1"
    labels:
      $run_label: $run_id
      poolctl-bench.tool: compose
    scale: $replicas
    stop_grace_period: ${grace}s
YAML
}

printf '%-4s %12s %12s %8s %10s %10s %12s %10s\n' run "poolctl ms" "compose ms" ratio "min up pc" "min up dc" "safe lim ms" "pc/limit"
worst=0
for run in $(seq "$runs"); do
  pool="bench-replace-$$-$run"
  dir=$tmp/pool$run
  # Create time: 10 fresh containers (the first half of the safe limit).
  write_pool "$dir" "$pool" 1
  t0=$(now_ms)
  "$poolctl" apply --yes --source "$dir" >"$tmp/create.out" 2>&1 || { cat "$tmp/create.out" >&2; exit 1; }
  create_ms=$(($(now_ms) - t0))

  write_pool "$dir" "$pool" 2
  start_sampling "poolctl.dev/pool=$pool" "$tmp/pc.samples"
  t0=$(now_ms)
  "$poolctl" apply --yes --source "$dir" >"$tmp/replace.out" 2>&1 || { cat "$tmp/replace.out" >&2; exit 1; }
  pc_ms=$(($(now_ms) - t0))
  pc_min=$(stop_sampling "$tmp/pc.samples")
  docker ps -aq --filter "label=poolctl.dev/pool=$pool" | xargs -r docker rm -f >/dev/null

  write_compose 1
  (cd "$tmp/compose" && docker-compose -p "$run_id" up -d >/dev/null 2>&1)
  write_compose 2
  start_sampling "poolctl-bench.tool=compose" "$tmp/dc.samples"
  t0=$(now_ms)
  (cd "$tmp/compose" && docker-compose -p "$run_id" up -d >/dev/null 2>&1)
  dc_ms=$(($(now_ms) - t0))
  dc_min=$(stop_sampling "$tmp/dc.samples")
  (cd "$tmp/compose" && docker-compose -p "$run_id" down -t 0 >/dev/null 2>&1)

  limit_ms=$((create_ms + grace * 1000))
  ratio=$(awk -v a="$pc_ms" -v b="$dc_ms" 'BEGIN {printf "%.2f", a / b}')
  over=$(awk -v a="$pc_ms" -v b="$limit_ms" 'BEGIN {printf "%.2f", a / b}')
  printf '%-4s %12s %12s %8s %10s %10s %12s %10s\n' "$run" "$pc_ms" "$dc_ms" "$ratio" "$pc_min" "$dc_min" "$limit_ms" "$over"
  awk -v r="$ratio" -v w="$worst" 'BEGIN {exit !(r > w)}' && worst=$ratio
  ((pc_min >= replicas)) || { echo "poolctl dropped to $pc_min running" >&2; exit 1; }
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
verdict=met
awk -v w="$worst" 'BEGIN {exit !(w <= 1.1)}' || verdict=MISSED
echo "target: poolctl <= 1.1 x docker-compose, never fewer than $replicas running: $verdict (worst ratio $worst)"
[[ $verdict == met ]]
