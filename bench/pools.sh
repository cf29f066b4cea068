#!/usr/bin/env bash
# Many pools at the speed of one: 30 pools of 2 containers each (PID 1 a bare `sleep`, which
# ignores SIGTERM, so every stop spends its whole 1s grace period), one pool per file of one
# directory source. Prints, each measured in this one run, poolctl's wall time for
#   - creating all 60 containers (one apply), against `xargs -P8 docker run -d` of the same 60;
#   - replacing all of them (a template change in every pool, maxSurge 2), against
#     `xargs -P8 docker run -d` of 60 new ones then `xargs -P8` stop (-t 1) and rm of the old;
#   - scaling every pool to 0, against `xargs -P8` stop (-t 1) and rm of the 60;
# and the ratio of each (target: at most 1.1).
# Needs a Docker daemon and the local image poolctl-busybox:latest (built by
# scripts/build-busybox-image when missing). Removes every container it created on exit.
# Usage: bench/pools.sh [pools] [replicas]   (default 30 2)
set -euo pipefail
pools=${1:-30}
replicas=${2:-2}
total=$((pools * replicas))
BENCH_NAME=pools
source "$(dirname "$0")/lib.sh"

echo "machine: $(nproc) cores, $(uname -sr), docker $(docker version -f '{{.Server.Version}}' 2>/dev/null)"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

write_pools() { # REPLICAS REVISION
  mkdir -p "$tmp/pools"
  for i in $(seq "$pools"); do
    cat >"$tmp/pools/pool-$i.yaml" <<YAML
apiVersion: poolctl.dev/v1alpha1
kind: Pool
metadata:
  name: bench-$$-$i
spec:
  replicas: $1
  template:
    image: poolctl-busybox:latest
    command: ["sleep", "3600"]
    env:
      REVISION: "$2"
    labels:
      $run_label: $run_id
  rollout:
    maxSurge: $replicas
    maxUnavailable: 0
    stopGracePeriod: 1s
    # The references do not watch a new container stay up; neither does poolctl here.
    monitor: 0s
YAML
  done
}

apply() { # what
  local t0
  t0=$(now_ms)
  "$poolctl" apply --yes --source "$tmp/pools" >"$tmp/$1.out" 2>&1 || { cat "$tmp/$1.out" >&2; exit 1; }
  echo $(($(now_ms) - t0))
}

# The reference: the same containers, 8 docker calls at a time.
run_ref() { # GENERATION
  local t0
  t0=$(now_ms)
  seq "$total" | xargs -P8 -I{} docker run -d --name "ref-$run_id-$1-{}" --label "$run_label=$run_id" \
    --label "poolctl-bench.ref=$1" -e "REVISION=$1" poolctl-busybox:latest sleep 3600 >/dev/null
  echo $(($(now_ms) - t0))
}
remove_ref() { # GENERATION
  local t0
  t0=$(now_ms)
  docker ps -aq --filter "label=poolctl-bench.ref=$1" |
    xargs -P8 -I{} sh -c 'docker stop -t 1 {} >/dev/null && docker rm {} >/dev/null'
  echo $(($(now_ms) - t0))
}

write_pools "$replicas" 1
pc_create=$(apply create)
write_pools "$replicas" 2
pc_replace=$(apply replace)
write_pools 0 2
pc_remove=$(apply remove)
# Instances only: a pool's rollout record (poolctl-rollout-POOL) stays, as it does after any apply.
left=$(docker ps -a --filter "label=$run_label=$run_id" --format '{{.Names}}' | grep -cv '^poolctl-rollout-' || true)
((left == 0)) || { echo "poolctl left $left containers" >&2; exit 1; }

ref_create=$(run_ref 1)
ref_replace=$(($(run_ref 2) + $(remove_ref 1)))
ref_remove=$(remove_ref 2)

printf '%-34s %12s %12s %8s\n' "$pools pools of $replicas" "poolctl ms" "xargs -P8 ms" ratio
worst=0
for what in create replace remove; do
  pc_var="pc_$what" ref_var="ref_$what"
  ratio=$(awk -v a="${!pc_var}" -v b="${!ref_var}" 'BEGIN {printf "%.2f", a / b}')
  printf '%-34s %12s %12s %8s\n' "$what" "${!pc_var}" "${!ref_var}" "$ratio"
  awk -v r="$ratio" -v w="$worst" 'BEGIN {exit !(r > w)}' && worst=$ratio
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
verdict=met
awk -v w="$worst" 'BEGIN {exit !(w <= 1.1)}' || verdict=MISSED
echo "target: each at most 1.1 x xargs -P8: $verdict (worst ratio $worst)"
