#!/usr/bin/env bash
# Benchmark `poolctl watch` against a local Git repository and the real Docker daemon:
#   1. latency from `git commit` to the first step of the new plan (median of N commits);
#   2. the watcher's steady-state RSS and CPU while idle (over IDLE seconds);
#   3. RSS growth over many reconciles (a short --resync forces one every 100ms).
# Prints the figures as Markdown, for the "Watch" section of BENCHMARKS.md.
#
# Usage: bench/watch_latency.sh [runs] [idle_seconds]   (needs the test image: run the Docker
# tests once, or `cargo test --test main docker::` builds poolctl-test-busybox:latest).
set -euo pipefail

RUNS=${1:-9}
IDLE=${2:-10}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${POOLCTL_BIN:-$ROOT/target/debug/poolctl}
IMAGE=poolctl-test-busybox:latest
POOL=bench-watch-$$
WORK=$(mktemp -d)
export POOLCTL_CACHE_DIR=$WORK/cache
PIDS=()

cleanup() {
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    docker ps -aq --filter "label=poolctl.dev/pool=$POOL" | xargs -r docker rm -f >/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT

[ -x "$BIN" ] || (cd "$ROOT" && cargo build -q)
docker image inspect "$IMAGE" >/dev/null 2>&1 || { echo "missing $IMAGE (run the Docker tests once)" >&2; exit 1; }

pool_yaml() { # $1 = env value
    cat <<EOF
apiVersion: poolctl.dev/v1alpha1
kind: Pool
metadata:
  name: $POOL
spec:
  replicas: 1
  template:
    image: $IMAGE
    env: {V: "$1"}
  rollout:
    stopGracePeriod: 2s
EOF
}

git_() { git -C "$WORK/repo" -c user.name=bench -c user.email=bench@poolctl.dev -c commit.gpgsign=false "$@"; }
mkdir -p "$WORK/repo"
git_ init -q -b main
pool_yaml 0 > "$WORK/repo/pool.yaml"
git_ add pool.yaml && git_ commit -qm start

count() { grep -c "$1" "$2" 2>/dev/null || true; }
# Wait (bounded) until file $2 holds more than $3 lines matching $1.
wait_count() {
    local deadline=$((SECONDS + 120))
    until [ "$(count "$1" "$2")" -gt "$3" ]; do
        [ $SECONDS -lt $deadline ] || { echo "timed out waiting for '$1' in $2" >&2; tail -20 "$2" >&2; exit 1; }
        sleep 0.05
    done
}
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# --- 1. commit -> first step latency -------------------------------------------------------
"$BIN" --log-format json watch --source "$WORK/repo" --ref main --interval 1h --resync 1h \
    >"$WORK/out" 2>"$WORK/log" &
WATCH=$!
PIDS+=("$WATCH")
wait_count "Apply complete" "$WORK/out" 0
RSS_FIRST=$(rss_kib "$WATCH")

LATENCIES=()
for i in $(seq 1 "$RUNS"); do
    done_before=$(count "Apply complete" "$WORK/out")
    pool_yaml "$i" > "$WORK/repo/pool.yaml"
    git_ add pool.yaml
    t0=$(date +%s.%N)
    git_ commit -qm "bump $i"
    wait_count "Apply complete" "$WORK/out" "$done_before"
    # The first step of the new plan: the first "[1/N] ... ..." start line logged after t0.
    ms=$(python3 - "$WORK/log" "$t0" <<'PY'
import json, sys, datetime
t0 = float(sys.argv[2])
for line in open(sys.argv[1]):
    try:
        e = json.loads(line)
    except ValueError:
        continue
    msg = e.get("fields", {}).get("message", "")
    if not (msg.startswith("[1/") and msg.endswith("...")):
        continue
    ts = datetime.datetime.fromisoformat(e["timestamp"].replace("Z", "+00:00")).timestamp()
    if ts >= t0:
        print(round((ts - t0) * 1000))
        break
PY
)
    LATENCIES+=("$ms")
done
RSS_AFTER=$(rss_kib "$WATCH")
MEDIAN=$(printf '%s\n' "${LATENCIES[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
MAX=$(printf '%s\n' "${LATENCIES[@]}" | sort -n | tail -1)

# --- 2. idle RSS and CPU --------------------------------------------------------------------
sleep 1 # let the rollout's own Docker events settle
TICKS0=$(cpu_ticks "$WATCH")
sleep "$IDLE"
TICKS1=$(cpu_ticks "$WATCH")
RSS_IDLE=$(rss_kib "$WATCH")
HZ=$(getconf CLK_TCK)
CPU_PCT=$(awk -v d=$((TICKS1 - TICKS0)) -v hz="$HZ" -v s="$IDLE" 'BEGIN {printf "%.2f", 100 * d / hz / s}')
kill -TERM "$WATCH"; wait "$WATCH" || true

# --- 3. RSS over many reconciles ------------------------------------------------------------
"$BIN" --log-format json watch --source "$WORK/repo" --ref main --interval 1h --resync 100ms \
    >"$WORK/out2" 2>"$WORK/log2" &
SPIN=$!
PIDS+=("$SPIN")
wait_count '"message":"plan (Resync)' "$WORK/log2" 50
RSS_50=$(rss_kib "$SPIN")
N50=$(count '"message":"plan (Resync)' "$WORK/log2")
wait_count '"message":"plan (Resync)' "$WORK/log2" 250
RSS_250=$(rss_kib "$SPIN")
N250=$(count '"message":"plan (Resync)' "$WORK/log2")
kill -TERM "$SPIN"; wait "$SPIN" || true

cat <<EOF
| figure | value |
| --- | --- |
| commit -> first step of the new plan, median of $RUNS | ${MEDIAN} ms (max ${MAX} ms; all: ${LATENCIES[*]}) |
| RSS after the first reconcile / after $RUNS rollouts | ${RSS_FIRST} KiB / ${RSS_AFTER} KiB |
| RSS idle, after ${IDLE}s | ${RSS_IDLE} KiB |
| CPU idle over ${IDLE}s | ${CPU_PCT} % of one core ($((TICKS1 - TICKS0)) ticks at ${HZ} Hz) |
| RSS after $N50 / $N250 resync reconciles (100ms) | ${RSS_50} KiB / ${RSS_250} KiB |
EOF
