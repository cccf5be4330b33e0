#!/usr/bin/env bash
# Start-up benchmark: the instructions (valgrind's callgrind, stable on a loaded machine) and
# the wall time (fastest and median of N runs) of `simulate` of the default scenario with its
# even plan and of `validate` of it, with the start-up cache warm, cold and off
# (costmodels/README.md, "Start-up cache"). Results: bench/README.md.
#
#   bench/startup.sh [BUILD_DIR=build] [N=20]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
n=${2:-20}
cli=$PWD/$build/bin/cephalo
cache=$(mktemp -d)
trap 'rm -rf "$cache"' EXIT
export CEPHALO_CACHE_DIR=$cache
sim=(simulate --scenario scenarios/default.json --plan scenarios/plans/default-even.json)
val=(validate scenarios/default.json)

instructions() {  # instructions of one run of the CLI with ARGS
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$cli" "$@" 2>&1 >/dev/null |
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
wall() {  # fastest and median wall ms over n runs
  python3 - "$n" "$cli" "$@" <<'PY'
import subprocess, sys, time
n, cmd = int(sys.argv[1]), sys.argv[2:]
ts = []
for _ in range(n):
    t = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    ts.append((time.perf_counter() - t) * 1e3)
ts.sort()
print(f"min {ts[0]:.1f} ms, median {ts[len(ts) // 2]:.1f} ms")
PY
}
printf '%-22s %14s  %s\n' "command, cache" "instructions" "wall"
for name in simulate validate; do
  if [ $name = simulate ]; then args=("${sim[@]}"); else args=("${val[@]}"); fi
  rm -rf "${cache:?}"/*
  printf '%-22s %14s\n' "$name, cold" "$(instructions "${args[@]}")"
  printf '%-22s %14s  %s\n' "$name, warm" "$(instructions "${args[@]}")" "$(wall "${args[@]}")"
  printf '%-22s %14s  %s\n' "$name, off" "$(CEPHALO_CACHE=off instructions "${args[@]}")" \
    "$(CEPHALO_CACHE=off wall "${args[@]}")"
done
printf '%-22s %14s  %s\n' "--version (floor)" "$(instructions --version)" "$(wall --version)"
