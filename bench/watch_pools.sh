#!/usr/bin/env bash
# Many pools under one `poolctl watch`: POOLS container-only pools of REPLICAS each, one pool per
# file of one directory source, against the real Docker daemon, every Docker request counted on
# the wire by bench/docker-proxy.py. Prints, as Markdown for the "Watch" section of
# BENCHMARKS.md:
#   1. how long the first reconcile (creating every instance) took;
#   2. the latency from rewriting one pool's file to the creation of its first new container
#      (Docker's own `Created`), and how many pools that change reconciled (target: 1);
#   3. over IDLE quiet seconds: the watcher's RSS and CPU, its reconciles, and its Docker
#      requests per minute, by kind.
# Usage: bench/watch_pools.sh [pools] [replicas] [idle_seconds]   (default 100 2 60; needs the
# test image: run the Docker tests once, or `cargo test --test main docker::`). POOLCTL_BIN
# picks the binary (default: the debug build). Removes every container it made on exit.
set -euo pipefail

POOLS=${1:-100}
REPLICAS=${2:-2}
IDLE=${3:-60}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${POOLCTL_BIN:-$ROOT/target/debug/poolctl}
IMAGE=poolctl-test-busybox:latest
RUN=bench-pools-$$
WORK=$(mktemp -d)
export POOLCTL_CACHE_DIR=$WORK/cache
PIDS=()

cleanup() {
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    docker ps -aq --filter "label=poolctl-bench.run=$RUN" | xargs -r -n 50 docker rm -f >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

[ -x "$BIN" ] || (cd "$ROOT" && cargo build -q)
docker image inspect "$IMAGE" >/dev/null 2>&1 || { echo "missing $IMAGE (run the Docker tests once)" >&2; exit 1; }

pool_yaml() { # $1 = pool number, $2 = env value
    cat <<EOF
apiVersion: poolctl.dev/v1alpha1
kind: Pool
metadata:
  name: $RUN-$1
spec:
  replicas: $REPLICAS
  template:
    image: $IMAGE
    command: ["sleep", "3600"]
    env: {V: "$2"}
    labels: {poolctl-bench.run: $RUN}
  rollout:
    stopGracePeriod: 1s
    monitor: 0s
EOF
}
mkdir -p "$WORK/src"
for i in $(seq "$POOLS"); do pool_yaml "$i" 0 > "$WORK/src/pool-$i.yaml"; done

# The counting proxy between poolctl and the daemon.
port=$((20000 + $$ % 20000))
python3 "$ROOT/bench/docker-proxy.py" "$port" "$WORK/requests" 2>"$WORK/proxy.err" &
PIDS+=("$!")
for try in $(seq 50); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    [ "$try" -lt 50 ] || { echo "the counting proxy did not start:" >&2; cat "$WORK/proxy.err" >&2; exit 1; }
    sleep 0.1
done
: > "$WORK/requests"

count() { local n; n=$(grep -c "$1" "$2" 2>/dev/null); echo "${n:-0}"; }
wait_count() { # until file $2 holds more than $3 lines matching $1 (bounded)
    local deadline=$((SECONDS + 600))
    until [ "$(count "$1" "$2")" -gt "$3" ]; do
        [ $SECONDS -lt $deadline ] || { echo "timed out waiting for '$1' in $2" >&2; tail -20 "$2" >&2; exit 1; }
        sleep 0.05
    done
}
since_ms() { # milliseconds from epoch seconds $2 to Docker's RFC 3339 timestamp $1
    python3 -c 'import sys, datetime
t = datetime.datetime.fromisoformat(sys.argv[1][:26].rstrip("Z") + "+00:00").timestamp()
print(round((t - float(sys.argv[2])) * 1000))' "$1" "$2"
}
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# --- 1. the first reconcile -------------------------------------------------------------------
t0=$(date +%s%N)
DOCKER_HOST=tcp://127.0.0.1:$port "$BIN" --log-format json watch --source "$WORK/src" --resync 60s \
    >"$WORK/out" 2>"$WORK/log" &
WATCH=$!
PIDS+=("$WATCH")
wait_count "Apply complete" "$WORK/out" 0
FIRST_MS=$((($(date +%s%N) - t0) / 1000000))
RSS_FIRST=$(rss_kib "$WATCH")
sleep 2 # let the creations' own Docker events settle

# --- 2. one pool's file changes ----------------------------------------------------------------
plans_before=$(count '"message":"plan (' "$WORK/log")
done_before=$(count "Apply complete" "$WORK/out")
t1=$(date +%s.%N)
pool_yaml 1 1 > "$WORK/src/pool-1.yaml"
wait_count "Apply complete" "$WORK/out" "$done_before"
first_created=$(docker ps -aq --filter "label=poolctl.dev/pool=$RUN-1" | xargs docker inspect -f '{{.Created}}' | sort | head -1)
CHANGE_MS=$(since_ms "$first_created" "$t1")
RECONCILED=$(($(count '"message":"plan (' "$WORK/log") - plans_before))
sleep 2

# --- 3. quiet ------------------------------------------------------------------------------------
plans_idle=$(count '"message":"plan (' "$WORK/log")
requests0=$(wc -l < "$WORK/requests")
cp "$WORK/requests" "$WORK/requests.before"
TICKS0=$(cpu_ticks "$WATCH")
sleep "$IDLE"
TICKS1=$(cpu_ticks "$WATCH")
RSS_IDLE=$(rss_kib "$WATCH")
requests1=$(wc -l < "$WORK/requests")
IDLE_PLANS=$(($(count '"message":"plan (' "$WORK/log") - plans_idle))
HZ=$(getconf CLK_TCK)
CPU_PCT=$(awk -v d=$((TICKS1 - TICKS0)) -v hz="$HZ" -v s="$IDLE" 'BEGIN {printf "%.2f", 100 * d / hz / s}')
PER_MIN=$(awk -v n=$((requests1 - requests0)) -v s="$IDLE" 'BEGIN {printf "%.0f", n * 60 / s}')
KINDS=$(tail -n +"$((requests0 + 1))" "$WORK/requests" | sed -E 's/\?.*//; s#/v[0-9.]+/#/#; s#/containers/[^/]+/#/containers/ID/#' \
    | sort | uniq -c | sort -rn | awk '{printf "%s%s %s: %d", sep, $2, $3, $1; sep="; "}')

cat <<EOF
| $POOLS pools of $REPLICAS under one watch | value |
| --- | --- |
| first reconcile, every instance created | ${FIRST_MS} ms |
| one pool's file rewritten -> its first new container created | ${CHANGE_MS} ms |
| pools that change reconciled | ${RECONCILED} |
| RSS after the first reconcile / after ${IDLE}s quiet | ${RSS_FIRST} KiB / ${RSS_IDLE} KiB |
| CPU over ${IDLE}s quiet | ${CPU_PCT} % of one core ($((TICKS1 - TICKS0)) ticks at ${HZ} Hz) |
| reconciles over ${IDLE}s quiet (resync 60s) | ${IDLE_PLANS} |
| Docker requests per quiet minute | ${PER_MIN} (${KINDS:-none}) |
EOF
