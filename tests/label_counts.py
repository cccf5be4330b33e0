#!/usr/bin/env python3
"""ctest check `tests.label_counts`: no label loses tests without a failure.

Counts the registered tests per label (`ctest --show-only=json-v1` in the build folder) and
fails when a label has fewer than its floor in tests/label_counts.json: a suite dropped by a
missing tool, a test executable that no longer discovers its tests, a ctest entry removed by
mistake. The floors are minimums, not exact counts, so adding tests never breaks this check;
`--update` rewrites the file with the current counts (after adding tests, to raise the floors).

A suite that configuration could not register (cmake/CephaloSuites.cmake writes its name to
<build>/unavailable_suites.txt; only possible outside CI, where CI=true fails configuration
instead) makes this check skip loudly (exit 77), naming the suites: the floors cannot be met.
"""
import argparse
import json
import os
import subprocess
import sys


def counts(ctest, build):
    out = subprocess.run([ctest, "--show-only=json-v1"], cwd=build, capture_output=True,
                         text=True, check=True).stdout
    per_label = {}
    for test in json.loads(out)["tests"]:
        labels = []
        for prop in test.get("properties", []):
            if prop["name"] == "LABELS":
                labels = prop["value"]
        for label in labels or ["(none)"]:
            per_label[label] = per_label.get(label, 0) + 1
    return per_label


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ctest", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--floors", required=True, help="tests/label_counts.json")
    ap.add_argument("--optional", action="append", default=[],
                    help="a label this build legitimately lacks (gpu without a CUDA toolkit)")
    ap.add_argument("--update", action="store_true")
    args = ap.parse_args()
    have = counts(args.ctest, args.build)
    print("tests per label: " + ", ".join(f"{k} {v}" for k, v in sorted(have.items())))
    if args.update:
        with open(args.floors, "w") as f:
            json.dump(dict(sorted(have.items())), f, indent=2)
            f.write("\n")
        print(f"wrote {args.floors}")
        return 0
    unavailable_file = os.path.join(args.build, "unavailable_suites.txt")
    if os.path.exists(unavailable_file):
        with open(unavailable_file) as f:
            missing = sorted({line.strip() for line in f if line.strip()})
        if missing:
            print("SKIPPED: configuration could not register the suites " + ", ".join(missing) +
                  " (a tool is missing; CI=true fails instead), so the floors cannot be met",
                  file=sys.stderr)
            return 77
    with open(args.floors) as f:
        floors = json.load(f)
    short = [f"{label}: {have.get(label, 0)} tests, at least {floor} expected"
             for label, floor in sorted(floors.items())
             if label not in args.optional and have.get(label, 0) < floor]
    if short:
        print("labels below their floor (tests/label_counts.json):\n  " + "\n  ".join(short),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
