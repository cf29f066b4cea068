#!/usr/bin/env bash
# Benchmark `poolctl watch` against a local Git repository and the real Docker daemon:
#   1. latency from `git commit` to the new container's start (Docker's StartedAt), median of N
#      commits, against a bare `docker run -d` of the same image (section 4);
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
# Milliseconds from epoch seconds $2 to Docker's RFC 3339 timestamp $1.
since_ms() {
    python3 -c 'import sys, datetime
t = datetime.datetime.fromisoformat(sys.argv[1][:26].rstrip("Z") + "+00:00").timestamp()
print(round((t - float(sys.argv[2])) * 1000))' "$1" "$2"
}
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
STARTS=()
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# --- 1. commit -> new container latency -------------------------------------------------------
"$BIN" --log-format json watch --source "$WORK/repo" --ref main --interval 1h --resync 1h \
    >"$WORK/out" 2>"$WORK/log" &
WATCH=$!
PIDS+=("$WATCH")
wait_count "Apply complete" "$WORK/out" 0
RSS_FIRST=$(rss_kib "$WATCH")

for i in $(seq 1 "$RUNS"); do
    done_before=$(count "Apply complete" "$WORK/out")
    pool_yaml "$i" > "$WORK/repo/pool.yaml"
    git_ add pool.yaml
    t0=$(date +%s.%N)
    git_ commit -qm "bump $i"
    wait_count "Apply complete" "$WORK/out" "$done_before"
    # commit -> the new container started, by Docker's own clock (State.StartedAt).
    started=$(docker ps -q --filter "label=poolctl.dev/pool=$POOL" | xargs -r docker inspect -f '{{.State.StartedAt}}' | sort | tail -1)
    STARTS+=("$(since_ms "$started" "$t0")")
done
RSS_AFTER=$(rss_kib "$WATCH")

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

# --- 4. a bare `docker run` of the same image, from the command to the container's start -----
BARE=()
for i in $(seq 1 "$RUNS"); do
    t0=$(date +%s.%N)
    id=$(docker run -d --label "poolctl.dev/pool=$POOL" "$IMAGE")
    BARE+=("$(since_ms "$(docker inspect -f '{{.State.StartedAt}}' "$id")" "$t0")")
    docker rm -f "$id" >/dev/null
done
START_MEDIAN=$(median "${STARTS[@]}")
BARE_MEDIAN=$(median "${BARE[@]}")
RATIO=$(awk -v a="$START_MEDIAN" -v b="$BARE_MEDIAN" 'BEGIN {printf "%.2f", a / b}')

cat <<EOF
| figure | value |
| --- | --- |
| commit -> new container started, median of $RUNS | ${START_MEDIAN} ms (all: ${STARTS[*]}) |
| bare \`docker run -d\` -> container started, median of $RUNS | ${BARE_MEDIAN} ms (all: ${BARE[*]}) |
| watch commit -> container / bare docker run | ${RATIO} (target <= 1.2) |
| RSS after the first reconcile / after $RUNS rollouts | ${RSS_FIRST} KiB / ${RSS_AFTER} KiB |
| RSS idle, after ${IDLE}s | ${RSS_IDLE} KiB |
| CPU idle over ${IDLE}s | ${CPU_PCT} % of one core ($((TICKS1 - TICKS0)) ticks at ${HZ} Hz) |
| RSS after $N50 / $N250 resync reconciles (100ms) | ${RSS_50} KiB / ${RSS_250} KiB |
EOF
