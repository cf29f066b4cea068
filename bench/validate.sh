#!/usr/bin/env bash
# Times `poolctl validate` on three hostile inputs and at half their size, to show that the time
# is linear in the input and each case stays under 1 s (see BENCHMARKS.md, "Validate"):
#   1. a 10 MB pool file (10,000 valid pool documents of 1 KB);
#   2. a file with 10^5 nesting levels (`a: [[[[...`), refused at the 64-level limit;
#   3. a file with 10^4 errors (2,500 pools with 4 errors each: an unknown field, a bad
#      duration, a negative count and an image Docker would refuse), every one reported.
# Each case runs 5 times in a fresh process; the medians of CPU time (user + system) and wall
# time are shown, process start included. The target is judged on CPU time, which a busy
# machine does not inflate. Needs python3. Exits non-zero when a case takes 1 s or more.
# Usage: bench/validate.sh [--release]   (default: the debug build, as `cargo test` makes it;
#        its dependencies, the YAML parser among them, are built with opt-level 1)
set -euo pipefail
cd "$(dirname "$0")/.."
profile=debug
if [[ ${1:-} == --release ]]; then
  profile=release
  cargo build --locked --release --bin poolctl >&2
else
  cargo build --locked --bin poolctl >&2
fi
exec python3 - "target/$profile/poolctl" "$profile" <<'EOF'
import os, resource, statistics, subprocess, sys, tempfile, time

binary, profile = sys.argv[1], sys.argv[2]
LIMIT_S = 1.0
RUNS = 5

def pool(i, extra=""):
    env = "".join(f"      VAR_{j}: value-{i}-{j}-padding-padding-padding\n" for j in range(18))
    return (
        "apiVersion: poolctl.dev/v1alpha1\nkind: Pool\nmetadata:\n"
        f"  name: pool-{i}\nspec:\n  replicas: 3\n  template:\n"
        f"    image: registry.example.com:5000/team/node:v1.{i % 40}.0\n"
        f"    env:\n{env}{extra}"
        "  rollout:\n    maxSurge: 25%\n    drainTimeout: 5m\n"
    )

def big(target_bytes):
    parts, size, i = [], 0, 0
    while size < target_bytes:
        doc = pool(i) + "---\n"
        parts.append(doc)
        size += len(doc)
        i += 1
    return "".join(parts), f"{i:,} pools"

def deep(levels):
    return "a: " + "[" * levels + "\n", f"{levels:,} levels"

def errors(count):
    docs = []
    for i in range(count // 4):
        doc = pool(i, "    bogus: 1\n").replace("drainTimeout: 5m", "drainTimeout: 5 minutes")
        doc = doc.replace("replicas: 3", "replicas: -1").replace("/team/", "/Team/")
        docs.append(doc)
    return "---\n".join(docs), f"{count:,} errors"

def measure(text, expect_code):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "pools.yaml")
        with open(path, "w") as f:
            f.write(text)
        times, cpus, code, err = [], [], None, ""
        for _ in range(RUNS):
            start, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
            out = subprocess.run([binary, "validate", "--source", path], capture_output=True, text=True)
            times.append(time.perf_counter() - start)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            code, err = out.returncode, out.stderr
        if code != expect_code:
            sys.exit(f"unexpected exit {code} (wanted {expect_code}):\n{err[:2000]}")
        return statistics.median(times), statistics.median(cpus), err

cases = [
    ("10 MB pool file", lambda k: big(10_000_000 // k), 0, None),
    ("10^5 nesting levels", lambda k: deep(100_000 // k), 1, "nested deeper than 64 levels"),
    ("10^4 errors", lambda k: errors(10_000 // k), 1, "10000 errors"),
]
print(f"poolctl validate, {profile} build, median of {RUNS} runs (process start included)\n")
print("| case | input | bytes | CPU s | wall s | CPU s at half size | ratio |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
missed = False
for name, make, code, must_say in cases:
    text, what = make(1)
    wall, cpu, err = measure(text, code)
    if must_say and must_say not in err:
        sys.exit(f"{name}: expected {must_say!r} in:\n{err[:2000]}")
    half_text, _ = make(2)
    _, half, _ = measure(half_text, code)
    ratio = cpu / half if half > 0 else float("inf")
    flag = "" if cpu < LIMIT_S else " (over 1 s)"
    missed |= cpu >= LIMIT_S
    print(f"| {name} | {what} | {len(text.encode()):,} | {cpu:.3f}{flag} | {wall:.3f} | {half:.3f} | {ratio:.2f} |")
print("\nTarget: each case under 1 s of CPU (user + system; wall time also counts waiting for a"
      " busy machine's cores), and linear: the full size takes about twice the half size.")
sys.exit(1 if missed else 0)
EOF
