#!/usr/bin/python3
"""scripts/validate-stacks refuses a bad check file (--data FOLDER) naming the file, the JSON
path, the value and what was expected, with exit status 1, before it simulates anything. Each
case breaks one field of the shipped check set.

    validate_stacks_bad_input.py SCRIPT CHECK_FILE OUT_DIR
"""
import copy
import json
import os
import subprocess
import sys


def main():
    script, check_file, out = sys.argv[1:4]
    good = json.load(open(check_file))
    cases = []

    def case(name, mutate, *says):
        doc = copy.deepcopy(good)
        text = mutate(doc)
        folder = os.path.join(out, name)
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, "stacks.json")
        with open(path, "w") as f:
            f.write(text if isinstance(text, str) else json.dumps(doc))
        cases.append((folder, path, says))

    case("zero-micro-batch", lambda d: d["points"][3].update(micro_batch=0),
         "points[3].micro_batch", "0", "a positive integer")
    case("missing-measured", lambda d: d["points"][5].pop("measured"),
         "points[5].measured", "(missing)", "tokens_per_s_per_gpu")
    case("negative-throughput",
         lambda d: d["points"][0]["measured"].update(tokens_per_s_per_gpu=-5),
         "points[0].measured", "-5", "a positive number")
    case("sharding", lambda d: d["points"][2].update(sharding="zero2"),
         "points[2].sharding", "zero2", "full, hybrid or replicas")
    case("unknown-source", lambda d: d["points"][1].update(source="nowhere"),
         "points[1].source", "nowhere", "not in the file's sources")
    case("unknown-model", lambda d: d["points"][4].update(model="llama9-1t"),
         "points[4].model", "llama9-1t", "not in the file's models")
    case("format", lambda d: d.update(format="published-throughput"),
         "format", "published-throughput", "published-stacks")
    case("not-json", lambda d: "{\"points\": [", "not a readable JSON file")
    # What Python's json module takes and the project's reader refuses (scripts/check_json.py):
    # before, true was 1 node, Infinity a measured throughput and the second of two keys won.
    case("true-nodes", lambda d: d["points"][0].update(nodes=True),
         "points[0].nodes", "True", "an integer from 1 to 4096")
    case("infinite-throughput",
         lambda d: d["points"][0]["measured"].update(tokens_per_s_per_gpu=float("inf")),
         "not a readable JSON file", "Infinity", "finite number")
    case("duplicate-key", lambda d: json.dumps(d).replace('"seq_len": ', '"seq_len": 1, "seq_len": ', 1),
         "not a readable JSON file", 'key "seq_len" given twice')
    failed = 0
    for folder, path, says in cases:
        r = subprocess.run([sys.executable, script, "--cephalo", "/nonexistent/cephalo",
                            "--data", folder, "--out", os.path.join(out, "generated")],
                           capture_output=True, text=True)
        text = r.stdout + r.stderr
        missing = [w for w in (path,) + says if w not in text]
        if r.returncode != 1 or missing:
            failed += 1
            print("FAIL %s: exit %d, missing %s in:\n%s" % (path, r.returncode, missing, text))
        else:
            print("ok   %s" % text.strip())
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
