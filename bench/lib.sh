# shellcheck shell=bash
# What the Docker bench scripts share: a scratch directory, a run id that labels every
# container they create (all removed on exit, on failure and on Ctrl-C too), the local test
# image, the release build of poolctl, and a clock. Source it after `set -euo pipefail` with
# BENCH_NAME set; a script with more to undo defines bench_cleanup before it exits.
cd "$(dirname "${BASH_SOURCE[0]}")/.."

tmp=$(mktemp -d)
run_id="bench-$BENCH_NAME-$$"
run_label="poolctl-bench.run"
_bench_cleanup() {
  declare -F bench_cleanup >/dev/null && bench_cleanup
  (cd "$tmp/compose" 2>/dev/null && docker-compose -p "$run_id" down -t 0 >/dev/null 2>&1) || true
  ids=$(docker ps -aq --filter "label=$run_label=$run_id" 2>/dev/null || true)
  # Many at a time, in chunks: one `docker rm` of a thousand names is one very long request.
  [[ -n $ids ]] && echo "$ids" | xargs -P8 -n 50 docker rm -f >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap _bench_cleanup EXIT
trap 'exit 130' INT TERM

docker image inspect poolctl-busybox:latest >/dev/null 2>&1 || scripts/build-busybox-image >&2
echo "Building (release) ..." >&2
cargo build -q --release --bin poolctl
poolctl=$PWD/target/release/poolctl
export POOLCTL_CACHE_DIR=$tmp/cache

now_ms() { echo $(($(date +%s%N) / 1000000)); }
