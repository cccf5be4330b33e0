#!/usr/bin/python3
"""Where the CPU loop's collectives spend their time: every measured call of an accuracy run,
split by what the members' compute threads were doing when the last participant arrived.

    tests/accuracy/collective_breakdown.py --cephalo build/bin/cephalo --work WORK [--attempt 0]

WORK is a folder `run_accuracy.py --work` filled. Per plan the chosen run (`<plan>.a<k>.run.json`)
gives each op's start and end on its rank; `cephalo simulate --trace` of the same plan and
scenario names the ops (rank, stream, kind, collective, bytes). A call counts, as `cephalo
compare` counts it, from the last participant's arrival to this member's end. "overlapped": a
member's compute stream was running an op at that instant (the op's remaining time is
reported); "alone": no member's compute stream was. Printed per collective kind: calls, median
and 10th / 90th percentile per call, the sum, the simulated sum and, for overlapped calls, the
sum of the overlapped compute ops' remaining time. Hybrid plans are left out (their groups
have one rank each).
"""
import argparse
import glob
import json
import os
import statistics
import subprocess


def op_metadata(cephalo, scenario, plan, trace_file):
    subprocess.run([cephalo, "simulate", "--scenario", scenario, "--plan", plan, "--trace",
                    trace_file], capture_output=True, check=True)
    with open(trace_file) as f:
        events = json.load(f)
    events = events["traceEvents"] if isinstance(events, dict) else events
    meta = {}
    for e in events:
        a = e.get("args", {})
        if e.get("ph") == "X" and "op" in a:
            meta[a["op"]] = {"rank": e["pid"], "stream": e["tid"], "kind": a["kind"],
                             "collective": a.get("collective", -1), "bytes": a.get("bytes", 0),
                             "sim_us": e["dur"]}
    return meta


def calls_of(meta, run):
    compute = {}
    for op, m in meta.items():
        if m["stream"] == 0 and op in run:
            compute.setdefault(m["rank"], []).append(run[op])
    members = {}
    for op, m in meta.items():
        if m["collective"] >= 0:
            members.setdefault(m["collective"], []).append(op)
    out = []
    for ops in members.values():
        last = max(run[o][0] for o in ops)
        remaining = {}
        for o in ops:
            r = meta[o]["rank"]
            remaining[r] = max([end - last for start, end in compute[r] if start <= last < end]
                               or [0.0])
        for o in ops:
            m = meta[o]
            out.append({"kind": m["kind"], "bytes": m["bytes"], "sim_us": m["sim_us"],
                        "measured_us": 1e6 * max(0.0, run[o][1] - max(run[o][0], last)),
                        "compute_remaining_us": 1e6 * max(remaining.values())})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cephalo", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--attempt", type=int, default=0)
    a = ap.parse_args()
    calls = []
    suffix = f".a{a.attempt}.sim.json"
    for sim in sorted(glob.glob(os.path.join(a.work, "*" + suffix))):
        tag = os.path.basename(sim)[:-len(suffix)]
        if "hybrid" in tag:
            continue
        scenario = os.path.join(a.work, f"{tag.split('.')[0]}.A{a.attempt}.scenario.json")
        plan = os.path.join(a.work, f"{tag}.plan.json")
        meta = op_metadata(a.cephalo, scenario, plan,
                           os.path.join(a.work, f"{tag}.a{a.attempt}.breakdown-trace.json"))
        with open(os.path.join(a.work, f"{tag}.a{a.attempt}.run.json")) as f:
            run = {o["id"]: (o["start_s"], o["end_s"]) for o in json.load(f)["ops"]}
        calls += calls_of(meta, run)
    for kind in sorted({c["kind"] for c in calls}):
        for label, overlapped in (("alone", False), ("overlapped", True)):
            sel = [c for c in calls if c["kind"] == kind and
                   (c["compute_remaining_us"] > 0) == overlapped]
            if not sel:
                continue
            t = sorted(c["measured_us"] for c in sel)
            line = (f"{kind:<16} {label:<10} {len(sel):>4} calls  median {statistics.median(t):7.0f} us"
                    f"  p10 {t[len(t) // 10]:6.0f}  p90 {t[(9 * len(t)) // 10]:7.0f}"
                    f"  sum {sum(t) / 1e3:7.2f} ms  simulated sum "
                    f"{sum(c['sim_us'] for c in sel) / 1e3:6.2f} ms")
            if overlapped:
                line += (f"  compute remaining sum "
                         f"{sum(c['compute_remaining_us'] for c in sel) / 1e3:6.2f} ms")
            print(line)


if __name__ == "__main__":
    main()
