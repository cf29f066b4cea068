#!/bin/sh
# Minutes of quiet under `poolctl watch` against the fake API server and real Docker: the
# requests the watch sends once its first reconcile is done, by kind, and that none is a list.
# See BENCHMARKS.md, "Quiet minutes under watch".
#   POOLCTL_BENCH_QUIET_SECS=300   how long the quiet lasts (default 300: past the 290 s window
#                                  the server keeps each watch open for)
set -eu
cd "$(dirname "$0")/.."
exec cargo test --test main -- --ignored --exact scope::bench_quiet_minutes_under_watch_send_no_list --nocapture "$@"
