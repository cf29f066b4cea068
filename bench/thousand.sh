#!/usr/bin/env bash
# A pool near its bound: 1,000 containers of the busybox image (PID 1 a bare `sleep`, which
# ignores SIGTERM, so every stop spends its whole 1s grace period). Prints, each measured in
# this one run, poolctl's wall time and peak RSS for
#   - creating the pool (one apply), against `xargs -P8 docker run -d` of the same containers;
#   - planning it converged, against `docker ps -q --filter label=...` (median of 5 each);
#   - replacing every instance (an environment change, maxSurge 100%), against `xargs -P8` runs
#     of as many new containers beside the old, then stop (-t 1) and rm of the old;
#   - removing it (replicas 0), against `xargs -P8` stop (-t 1) and rm of the same containers;
# and with BENCH_COMPOSE=1 also `docker-compose up -d --scale svc=N` and `down` (slow).
# Needs a Docker daemon and the local image poolctl-busybox:latest (built by
# scripts/build-busybox-image when missing). Removes every container it created on exit.
# Usage: bench/thousand.sh [instances]   (default 1000)
set -euo pipefail
n=${1:-1000}
BENCH_NAME=thousand
source "$(dirname "$0")/lib.sh"

echo "machine: $(nproc) cores, $(uname -sr), docker $(docker version -f '{{.Server.Version}}' 2>/dev/null)"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

median() { sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }

write_pool() { # REPLICAS REVISION
  mkdir -p "$tmp/pools"
  cat >"$tmp/pools/pool.yaml" <<YAML
apiVersion: poolctl.dev/v1alpha1
kind: Pool
metadata:
  name: thousand-$$
spec:
  replicas: $1
  template:
    image: poolctl-busybox:latest
    command: ["sleep", "3600"]
    # A Linux bridge takes at most 1,024 ports: a surge of 100% past 512 instances does not fit
    # on docker0 ("exchange full"), and these containers need no network.
    network: none
    env:
      REVISION: "$2"
    labels:
      $run_label: $run_id
  rollout:
    maxSurge: 100%
    maxUnavailable: 0
    stopGracePeriod: 1s
    # The references do not watch a new container stay up; neither does poolctl here.
    monitor: 0s
YAML
}

# poolctl COMMAND... : prints "wall_ms peak_rss_kb"; the command's output goes to $tmp/out.
timed() {
  local t0 t1
  t0=$(now_ms)
  /usr/bin/time -f "%M" -o "$tmp/rss" "$poolctl" "$@" --source "$tmp/pools" >"$tmp/out" 2>&1 || {
    grep -E "FAILED|failed:|^error|Apply halted" "$tmp/out" | head -20 >&2
    exit 1
  }
  t1=$(now_ms)
  echo "$((t1 - t0)) $(tail -1 "$tmp/rss")"
}

write_pool "$n" 1
read -r pc_create pc_create_rss < <(timed apply --yes)
plans=$(for _ in 1 2 3 4 5; do timed plan --detailed-exitcode; done)
pc_plan=$(echo "$plans" | cut -d' ' -f1 | median)
pc_plan_rss=$(echo "$plans" | cut -d' ' -f2 | median)
ps_ms=$(for _ in 1 2 3 4 5; do
  t0=$(now_ms)
  docker ps -q --filter "label=$run_label=$run_id" >/dev/null
  echo $(($(now_ms) - t0))
done | median)
write_pool "$n" 2
read -r pc_replace pc_replace_rss < <(timed apply --yes)
write_pool 0 2
read -r pc_remove pc_remove_rss < <(timed apply --yes)

# The reference does the same three with the docker CLI, 8 calls at a time: create n, then
# replace them (n new ones created beside them, then the old ones stopped and removed), then
# remove the new ones.
ref_run() { # GENERATION
  seq "$n" | xargs -P8 -I{} docker run -d --network none --name "ref-$run_id-$1-{}" \
    --label "$run_label=$run_id" --label "poolctl-bench.ref=$run_id-$1" \
    poolctl-busybox:latest sleep 3600 >/dev/null
}
ref_stop_rm() { # GENERATION
  docker ps -aq --filter "label=poolctl-bench.ref=$run_id-$1" |
    xargs -P8 -I{} sh -c 'docker stop -t 1 {} >/dev/null && docker rm {} >/dev/null'
}
t0=$(now_ms)
ref_run 1
ref_create=$(($(now_ms) - t0))
t0=$(now_ms)
ref_run 2
ref_stop_rm 1
ref_replace=$(($(now_ms) - t0))
t0=$(now_ms)
ref_stop_rm 2
ref_remove=$(($(now_ms) - t0))

best_create=$ref_create best_remove=$ref_remove compose="not run (BENCH_COMPOSE=1)"
if [[ ${BENCH_COMPOSE:-0} == 1 ]]; then
  mkdir -p "$tmp/compose"
  cat >"$tmp/compose/docker-compose.yml" <<YAML
version: "2.4"
services:
  svc:
    image: poolctl-busybox:latest
    command: ["sleep", "3600"]
    network_mode: none
    labels:
      $run_label: $run_id
    stop_grace_period: 1s
YAML
  t0=$(now_ms)
  (cd "$tmp/compose" && docker-compose -p "$run_id" up -d --scale "svc=$n" >/dev/null 2>&1)
  dc_create=$(($(now_ms) - t0))
  t0=$(now_ms)
  (cd "$tmp/compose" && docker-compose -p "$run_id" down -t 1 >/dev/null 2>&1)
  dc_remove=$(($(now_ms) - t0))
  ((dc_create < best_create)) && best_create=$dc_create
  ((dc_remove < best_remove)) && best_remove=$dc_remove
  compose="create ${dc_create} ms, remove ${dc_remove} ms"
fi

ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
printf '%-26s %10s %12s %14s %8s\n' "$n instances" "poolctl ms" "peak RSS KB" "reference ms" ratio
printf '%-26s %10s %12s %14s %8s\n' "create" "$pc_create" "$pc_create_rss" "$best_create" "$(ratio "$pc_create" "$best_create")"
printf '%-26s %10s %12s %14s %8s\n' "plan, converged (median)" "$pc_plan" "$pc_plan_rss" "$ps_ms" "$(ratio "$pc_plan" "$ps_ms")"
printf '%-26s %10s %12s %14s %8s\n' "replace (maxSurge 100%)" "$pc_replace" "$pc_replace_rss" "$ref_replace" "$(ratio "$pc_replace" "$ref_replace")"
printf '%-26s %10s %12s %14s %8s\n' "remove" "$pc_remove" "$pc_remove_rss" "$best_remove" "$(ratio "$pc_remove" "$best_remove")"
echo "references: xargs -P8 create ${ref_create} ms, replace ${ref_replace} ms, remove ${ref_remove} ms; docker-compose: $compose"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
