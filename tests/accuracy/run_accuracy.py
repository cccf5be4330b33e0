#!/usr/bin/python3
"""Simulated-vs-measured accuracy on the CPU backend: profile -> plan -> simulate ->
run -> compare, for several plans on 2-rank CPU clusters, with and without an emulated slow rank.

Every number printed is measured on this machine by the commands shown; nothing is assumed.
The suite checks the loop itself strictly (every command succeeds, the simulator and the backend
run the same ops, every error is finite) and reports the accuracy targets:
  * median |iteration-time error| <= 10 %
  * per-rank peak-memory error <= 10 % (max over plans and ranks)
  * Kendall tau between simulated and measured plan order (by iteration time)
  * median |all-gather error| and median |reduce-scatter error| <= 25 % (per op class, over plans)
The targets themselves are enforced only with --strict (or CEPHALO_ACCURACY_STRICT=1): on a
shared 2-core machine the measured side is dominated by scheduling noise, and a red CI for that
would say nothing about the code. Always enforced are looser bounds (FAIL_BOUNDS) that a broken
simulator or backend would cross (a cost model off by 1.5x, a memory term dropped or doubled, an
order that no longer follows the measurement), widened by the noise the suite measures itself:
the plans are run in interleaved rounds, the profile is taken before and after them, and their
drift plus the runs' spread is the noise (see measure()). A measurement too noisy to decide is
repeated, and reported as undecidable rather than judged. The plan order (Kendall tau) is
compared within each scenario. The README of this folder records the results with their date.
"""
import argparse
import datetime
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# Always enforced (see the module docstring): median |iteration-time error|, max |peak-memory
# error| over plans and ranks, and Kendall tau of the plan order over the *resolved* pairs: plans
# whose simulated iteration times differ by at least RESOLVED_GAP. Pairs closer than that (the
# same schedule layered vs standard, with or without offload: a few per cent apart) are ordered
# by scheduling noise on a loaded 2-core machine (all-pairs tau fell to -0.16 once under load and
# is 0.6-0.8 when quiet); pairs this far apart (the emulated slow rank, even vs optimal on it)
# are flipped only by a simulator or backend that is wrong (tau over them must exceed 0.5: three
# in four concordant). The pairs are chosen from the
# deterministic simulation, never from the measurement, so the check cannot choose to pass;
# fewer than MIN_RESOLVED_PAIRS of them fails too (the suite would no longer test the order).
FAIL_BOUNDS = {"median_abs_iteration_error": 0.30, "max_abs_peak_memory_error": 0.15,
               "kendall_tau_resolved": 0.5}
# The iteration bounds are widened by the noise each measurement measures (profile drift + the
# runs' spread, see measure()); above NOISE_LIMIT the median bound would pass 0.50, past what a
# cost model off by 1.5x gives, and the measurement cannot decide (the suite measures again).
NOISE_LIMIT = 0.20
# Exit status when every measurement was too noisy to decide (ctest: SKIP_RETURN_CODE).
UNDECIDED = 77
# A measurement is also undecidable when other processes competed for the cores while it ran:
# its 1-minute load average (sampled before and after it) above the cores plus one (the two MPI
# ranks' own load is two). Contention is not noise that averages out: an emulated slow rank
# sleeps, so under load it loses less time than the plans that compute, and plans 20 % apart in
# simulation swapped order consistently across runs at load 9 (Kendall tau 0.000 over the
# resolved pairs, 2026-12-05), which neither the profile drift nor the run-to-run spread showed.
LOAD_MARGIN = 1.0
RESOLVED_GAP = 0.20
MIN_RESOLVED_PAIRS = 10
# The hybrid-sharding plan alone, always enforced: its peak memory (every rank holds
# a full copy of the state, the cross-group all-reduce's buffers) as tight as the suite's; its
# iteration time looser than the median bound, since one plan's fastest-of-3 run still carries
# the machine's load (single plans ran -20 %..+117 % under heavy load, README.md).
HYBRID_BOUNDS = {"abs_iteration_error": 0.50, "abs_peak_memory_error": 0.15}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run(cmd, capture=True, env=None):
    log("$ " + " ".join(cmd))
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=capture, text=True, env=env)
    if p.returncode != 0:
        log(p.stdout or "")
        log(p.stderr or "")
        raise SystemExit(f"FAILED ({p.returncode}): {' '.join(cmd)}")
    log(f"  ok in {time.time() - t0:.1f} s")
    return p.stdout


def kendall_tau(a, b):
    """Kendall tau-b of two equally long sequences (ties counted as neither)."""
    n = len(a)
    conc = disc = ties_a = ties_b = 0
    for i in range(n):
        for j in range(i + 1, n):
            da = a[i] - a[j]
            db = b[i] - b[j]
            if da == 0 and db == 0:
                continue
            if da == 0:
                ties_a += 1
            elif db == 0:
                ties_b += 1
            elif (da > 0) == (db > 0):
                conc += 1
            else:
                disc += 1
    denom = math.sqrt((conc + disc + ties_a) * (conc + disc + ties_b))
    return (conc - disc) / denom if denom > 0 else float("nan")


def resolved_tau(sim, run, gap):
    """Kendall tau over the pairs whose simulated values differ by at least `gap` (relative to
    the smaller); returns (tau, number of such pairs)."""
    conc = disc = 0
    for i in range(len(sim)):
        for j in range(i + 1, len(sim)):
            if abs(sim[i] - sim[j]) < gap * min(sim[i], sim[j]):
                continue
            if (sim[i] - sim[j]) * (run[i] - run[j]) > 0:
                conc += 1
            else:
                disc += 1
    n = conc + disc
    return ((conc - disc) / n if n else float("nan")), n


def scenario(name, slowdown, calibration, global_batch, seq):
    gpus = [{"type": "cpu", "threads": 1}, {"type": "cpu", "threads": 1}]
    if slowdown != 1.0:
        gpus[1]["slowdown"] = slowdown
    return {
        "name": name,
        "description": "accuracy suite: 2 CPU ranks" +
                       (f", rank 1 EMULATED {slowdown}x slower" if slowdown != 1.0 else ""),
        "cluster": {"name": name, "nodes": [{
            "name": "host", "gpus": gpus,
            "intra_link": {"kind": "shm", "bandwidth": "5GB/s", "latency": "2us"}}]},
        "job": {"model": "gpt-tiny", "sequence_length": seq, "global_batch": global_batch,
                "precision": {"params": "fp32", "compute": "fp32", "reduce": "fp32"},
                # what the CPU backend runs (backend/include/cephalo/backend/implementation.hpp)
                "implementation": {"attention": "eager", "fused_elementwise": False}},
        "calibration": calibration,
    }


def with_micro_batches(plan, count, accumulation, offload="none", checkpointing="full",
                       sharding="full"):
    """The planner's batches and shares, run as `count` micro-batches per rank with the given
    accumulation (the suite compares schedules, so it fixes the micro-batching itself).
    sharding "hybrid": every rank its own group (each holds a full copy of the state; the
    gradients meet in the cross-group all-reduce), the only hybrid grouping of 2 ranks."""
    p = json.loads(json.dumps(plan))
    p.pop("predicted", None)
    p["accumulation"] = accumulation
    p["offload"] = offload
    # Always written: the planner's default may have chosen another checkpointing, and the
    # variant fixes it (host offload needs full).
    p["activation_checkpointing"] = checkpointing
    if sharding == "hybrid":
        p["sharding"] = {"kind": "hybrid", "groups": [[r["rank"]] for r in p["ranks"]]}
        for r in p["ranks"]:
            r["state_share"] = 1.0
    for r in p["ranks"]:
        b = r["batch"]
        k = max(1, min(count, b))
        size = -(-b // k)
        r["micro_batch"] = size
        r["micro_batches"] = -(-b // size)
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cephalo", required=True)
    ap.add_argument("--mpirun", default=shutil.which("mpirun") or "mpirun")
    ap.add_argument("--work", required=True, help="folder for every generated file")
    ap.add_argument("--steps", type=int, default=3, help="training steps per run (last is measured)")
    # 5, not 3: on a contended VM (2026-12-01 22:20, every op 2-4x slower than in the recorded
    # runs) the fastest of 3 runs was 33-36 % off the profile, the fastest of 5 27.7 %.
    ap.add_argument("--runs", type=int, default=5,
                    help="runs per plan, in rounds that run every plan once")
    ap.add_argument("--attempts", type=int, default=3,
                    help="measurements (profile, rounds, profile) the suite may take until the "
                         "noise it measures is low enough to decide (NOISE_LIMIT)")
    ap.add_argument("--statistic", choices=["min", "median"], default="min",
                    help="both sides alike: the profile's statistic over repeats and the run "
                         "compared among --runs (min: least disturbed by other processes)")
    ap.add_argument("--global-batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--micro-batches", type=int, default=2)
    ap.add_argument("--slowdown", type=float, default=2.0)
    ap.add_argument("--json", help="write the result record here")
    ap.add_argument("--strict", action="store_true",
                    default=os.environ.get("CEPHALO_ACCURACY_STRICT") == "1")
    a = ap.parse_args()

    os.makedirs(a.work, exist_ok=True)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    mpi = [a.mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2"]
    W = lambda f: os.path.join(a.work, f)
    C = a.cephalo

    def profile(out):
        """`cephalo profile` under mpirun into `out` (+ its .sweep.json); returns the two
        calibration files and the per-sample spread of the layer time across micro-batch sizes
        (how much other processes disturbed the profile)."""
        run(mpi + [C, "profile", "--device", "cpu", "--model", "gpt-tiny", "--seq", str(a.seq),
                   "--micro-batches", f"1..{max_mb}", "--repeats", "11", "--warmup", "2",
                   "--max-bytes", "4MiB", "--statistic", a.statistic, "-o", out], env=env)
        with open(out) as f:
            layer = json.load(f)["rows"][0]["layer"]
        per_sample = [(p["forward_ms"] + p["backward_ms"]) / p["micro_batch"] for p in layer]
        spread = max(per_sample) / min(per_sample)
        log(f"profile {os.path.basename(out)}: per-sample layer F+B time {min(per_sample):.3f}.."
            f"{max(per_sample):.3f} ms across micro-batches 1..{max_mb} (spread x{spread:.2f})")
        return [out, out[:-len(".json")] + ".sweep.json"], spread

    def write_scenario(scen_name, slow, calibration, tag):
        sfile = W(f"{scen_name}.{tag}.scenario.json")
        with open(sfile, "w") as f:
            json.dump(scenario(scen_name, slow, calibration, a.global_batch, a.seq), f, indent=2)
        return sfile

    # 1. profile under mpirun: compute per micro-batch, optimizer, copies, collective sweep
    max_mb = a.global_batch // 2
    first_calibration, first_spread = profile(W("calibA0.json"))

    # 2. scenarios and plans (planned once, from the first profile; every measurement below
    # runs these same plans)
    scenarios = (("cpu2", 1.0), ("cpu2-slow", a.slowdown))
    plans = []
    for scen_name, slow in scenarios:
        sfile = write_scenario(scen_name, slow, first_calibration, "A0")
        for strategy in ("even", "optimal"):
            base = W(f"{scen_name}.{strategy}.base.json")
            run([C, "plan", "--scenario", sfile, "--strategy", strategy, "-o", base])
            with open(base) as f:
                planned = json.load(f)
            # layered and standard; the optimal plan also with activations offloaded to host
            # (exercises the copy ops on both sides)
            variants = [("layered", "none", "full", "full"), ("standard", "none", "full", "full")]
            if strategy == "optimal":
                variants.append(("layered", "host", "full", "full"))
                # without activation checkpointing, and FSDP's no_sync accumulation
                variants.append(("layered", "none", "none", "full"))
                variants.append(("no_sync", "none", "full", "full"))
                # hybrid sharding, once: the emulated slow rank's uneven batches
                if slow != 1.0:
                    variants.append(("layered", "none", "full", "hybrid"))
            for acc, offload, ckpt, sharding in variants:
                label = acc + ("+offload" if offload == "host" else "") + (
                    "+no-ckpt" if ckpt == "none" else "") + (
                    "+hybrid" if sharding == "hybrid" else "")
                name = f"{scen_name}/{strategy}/{label}"
                pfile = W(f"{scen_name}.{strategy}.{label}.plan.json")
                with open(pfile, "w") as f:
                    json.dump(with_micro_batches(planned, a.micro_batches, acc, offload, ckpt,
                                                 sharding), f, indent=2)
                plans.append({"name": name, "scenario_name": scen_name, "slowdown": slow,
                              "plan": pfile, "hybrid": sharding == "hybrid"})

    # 3. measure: a profile, --runs rounds that run every plan once each (interleaved, so a
    # change of the machine's load reaches every plan alike), a second profile. The noise is
    # measured, not assumed: `drift` is how far the simulated iteration times move between
    # the two profiles (the machine's speed changing while the suite runs), `run_noise` how far
    # each plan's second-fastest run is from its fastest. The bound on the median iteration
    # error is FAIL_BOUNDS' plus that noise; a noise above NOISE_LIMIT would widen it past the
    # errors a broken cost model makes, so the suite cannot decide from that measurement and
    # measures again (--attempts in all), keeping the quietest one.
    def measure(k, calibration_a, spread_a):
        load_before = os.getloadavg()[0]
        times = {p["name"]: [] for p in plans}
        for rnd in range(a.runs):
            for p in plans:
                tag = p["name"].replace("/", ".")
                rf = W(f"{tag}.a{k}.run{rnd}.json")
                sfile = W(f"{p['scenario_name']}.A{k}.scenario.json")
                if not os.path.exists(sfile):
                    write_scenario(p["scenario_name"], p["slowdown"], calibration_a, f"A{k}")
                run(mpi + [C, "run", "--scenario", sfile, "--plan", p["plan"], "--steps",
                           str(a.steps), "--result", rf, "--json"], env=env)
                with open(rf) as f:
                    times[p["name"]].append((json.load(f)["iteration_time_s"], rf))
        calibration_b, spread_b = profile(W(f"calibB{k}.json"))
        rows, drifts, run_noises = [], [], []
        for p in plans:
            tag = p["name"].replace("/", ".")
            sa = write_scenario(p["scenario_name"], p["slowdown"], calibration_a, f"A{k}")
            sb = write_scenario(p["scenario_name"], p["slowdown"], calibration_b, f"B{k}")
            sim_file, run_file = W(f"{tag}.a{k}.sim.json"), W(f"{tag}.a{k}.run.json")
            with open(sim_file, "w") as f:
                f.write(run([C, "simulate", "--scenario", sa, "--plan", p["plan"], "--ops",
                             "--json"]))
            sim_b = json.loads(run([C, "simulate", "--scenario", sb, "--plan", p["plan"],
                                    "--json"]))["iteration_time_s"]
            measured = sorted(times[p["name"]])
            pick = measured[0] if a.statistic == "min" else measured[len(measured) // 2]
            shutil.copyfile(pick[1], run_file)
            spread = [m[0] for m in times[p["name"]]]
            if len(measured) > 1:
                run_noises.append(measured[1][0] / measured[0][0] - 1)
            cmp = json.loads(run([C, "compare", sim_file, run_file, "--scenario", sa, "--plan",
                                  p["plan"], "--json", "--trace",
                                  W(tag + ".merged-trace.json")]))
            e2e = {m["metric"]: m for m in cmp["end_to_end"]}
            it = e2e["iteration_time_s"]
            drifts.append(abs(sim_b / it["simulated"] - 1))
            mem_errors = [r["peak_memory_error"] for r in cmp["ranks"]]
            classes = {c["class"]: c for c in (cmp["op_classes"] or [])}
            # the loop itself: same ops on both sides, finite numbers
            for c in classes.values():
                if c["simulated_ops"] != c["measured_ops"]:
                    raise SystemExit(f"{p['name']}: {c['class']}: simulator ran "
                                     f"{c['simulated_ops']} ops, backend {c['measured_ops']}")
            for v in [it["error"]] + mem_errors:
                if v is None or not math.isfinite(v):
                    raise SystemExit(f"{p['name']}: non-finite error in {run_file}")
            with open(p["plan"]) as f:
                plan = json.load(f)
            rows.append({
                "plan": p["name"],
                "scenario": p["scenario_name"],
                "hybrid": p["hybrid"],
                "batches": [r["batch"] for r in plan["ranks"]],
                "shares": [round(r["state_share"], 4) for r in plan["ranks"]],
                "micro_batches": [r["micro_batches"] for r in plan["ranks"]],
                "sim_iteration_s": it["simulated"], "run_iteration_s": it["measured"],
                "sim_iteration_s_second_profile": sim_b,
                "run_iteration_s_all_runs": spread,
                "iteration_error": it["error"],
                "peak_memory_errors": mem_errors,
                "sim_peak_memory_bytes": [r["simulated_peak_memory_bytes"] for r in cmp["ranks"]],
                "run_peak_memory_bytes": [r["measured_peak_memory_bytes"] for r in cmp["ranks"]],
                "op_class_errors": {k2: c["error"] for k2, c in classes.items()},
            })
        drift = statistics.median(drifts)
        run_noise = statistics.median(run_noises) if run_noises else 0.0
        load_after = os.getloadavg()
        return {"attempt": k, "rows": rows, "drift": drift, "run_noise": run_noise,
                "noise": drift + run_noise, "profile_spread": [spread_a, spread_b],
                "load_average": load_after, "max_load": max(load_before, load_after[0])}

    cores = os.cpu_count() or 1
    load_limit = cores + LOAD_MARGIN

    def decidable(m):
        return m["noise"] <= NOISE_LIMIT and m["max_load"] <= load_limit

    attempts = []
    for k in range(a.attempts):
        calibration_a, spread_a = ((first_calibration, first_spread) if k == 0
                                   else profile(W(f"calibA{k}.json")))
        m = measure(k, calibration_a, spread_a)
        attempts.append(m)
        log(f"measurement {k + 1}: noise {100 * m['noise']:.1f} % (profile drift "
            f"{100 * m['drift']:.1f} %, run-to-run {100 * m['run_noise']:.1f} %; decidable up "
            f"to {100 * NOISE_LIMIT:.0f} %), load average up to {m['max_load']:.1f} on {cores} "
            f"cores (decidable up to {load_limit:.1f})")
        if decidable(m):
            break
        if k + 1 < a.attempts:
            log("  cannot decide from this one: too noisy, or other processes competed for the "
                "cores; measuring again")
    usable = [m for m in attempts if decidable(m)]
    chosen = min(usable or attempts, key=lambda m: m["noise"])
    rows = chosen["rows"]
    profile_spread = max(chosen["profile_spread"])
    iteration_bound = FAIL_BOUNDS["median_abs_iteration_error"] + chosen["noise"]

    med_it = statistics.median(abs(r["iteration_error"]) for r in rows)
    max_mem = max(abs(e) for r in rows for e in r["peak_memory_errors"])
    # The plan order within each scenario: across the two scenarios every pair would just
    # measure the emulated 2x slowdown.
    tau_terms, res_conc, res_pairs = [], 0, 0
    for scen_name, _ in scenarios:
        srows = [r for r in rows if r["scenario"] == scen_name]
        sim = [r["sim_iteration_s"] for r in srows]
        meas = [r["run_iteration_s"] for r in srows]
        t = kendall_tau(sim, meas)
        if math.isfinite(t):
            tau_terms.append((t, len(srows)))
        t_res, n_res = resolved_tau(sim, meas, RESOLVED_GAP)
        if n_res:
            res_conc += round((t_res + 1) / 2 * n_res)
            res_pairs += n_res
    tau = (sum(t * n for t, n in tau_terms) / sum(n for _, n in tau_terms)
           if tau_terms else float("nan"))
    tau_res = (2 * res_conc - res_pairs) / res_pairs if res_pairs else float("nan")
    targets = {"median_abs_iteration_error": {"value": med_it, "target": 0.10,
                                              "met": med_it <= 0.10},
               "max_abs_peak_memory_error": {"value": max_mem, "target": 0.10,
                                             "met": max_mem <= 0.10},
               "kendall_tau": {"value": tau, "target": "> 0 (same order, within each scenario)",
                               "met": math.isfinite(tau) and tau > 0}}
    # The collectives per class (Σ over a plan's calls, from the last participant's arrival):
    # reported targets, like the others enforced only with --strict, since a collective of
    # ~100 us is what other processes on the 2 cores stretch most.
    for cls in ("all-gather", "reduce-scatter"):
        errs = [abs(r["op_class_errors"][cls]) for r in rows
                if r["op_class_errors"].get(cls) is not None]
        if errs:
            med = statistics.median(errs)
            targets[f"median_abs_{cls.replace('-', '_')}_error"] = {
                "value": med, "target": 0.25, "met": med <= 0.25}

    # 4. the table
    hdr = f"{'plan':<34} {'batches':>8} {'mb':>6} {'sim it':>9} {'run it':>9} {'err':>8} " \
          f"{'mem err r0/r1':>16} {'F err':>7} {'B err':>7} {'AG err':>7} {'RS err':>7} " \
          f"{'copy err':>8}  runs (ms)"
    print(hdr)
    print("-" * len(hdr))
    pct = lambda v: "-" if v is None else f"{100 * v:+.1f}%"
    for r in rows:
        oc = r["op_class_errors"]
        print(f"{r['plan']:<34} {'/'.join(map(str, r['batches'])):>8} "
              f"{'/'.join(map(str, r['micro_batches'])):>6} "
              f"{1e3 * r['sim_iteration_s']:>7.1f}ms {1e3 * r['run_iteration_s']:>7.1f}ms "
              f"{pct(r['iteration_error']):>8} "
              f"{'/'.join(pct(e) for e in r['peak_memory_errors']):>16} "
              f"{pct(oc.get('forward')):>7} {pct(oc.get('backward')):>7} "
              f"{pct(oc.get('all-gather')):>7} {pct(oc.get('reduce-scatter')):>7} "
              f"{pct(oc.get('copies')):>8}  "
              f"{'/'.join(f'{1e3 * t:.0f}' for t in r['run_iteration_s_all_runs'])}")
    print()
    print(f"profile spread (max/min per-sample layer F+B time over micro-batch sizes): "
          f"x{profile_spread:.2f}")
    for k, t in targets.items():
        v = t["value"]
        shown = f"{100 * v:.1f} %" if k != "kendall_tau" else f"{v:.3f}"
        print(f"{k:<32} {shown:>10}   target {t['target']}   "
              f"{'met' if t['met'] else 'NOT MET'}")
    print(f"{'kendall_tau_resolved':<32} {tau_res:>10.3f}   over the {res_pairs} pairs within a "
          f"scenario whose simulated times differ by >= {100 * RESOLVED_GAP:.0f} % (always "
          f"enforced: > {FAIL_BOUNDS['kendall_tau_resolved']}, >= {MIN_RESOLVED_PAIRS} pairs)")
    print(f"{'measured noise':<32} {100 * chosen['noise']:>8.1f} %   profile drift "
          f"{100 * chosen['drift']:.1f} % + run-to-run {100 * chosen['run_noise']:.1f} % "
          f"(measurement {chosen['attempt'] + 1} of {len(attempts)}); enforced median bound "
          f"{100 * FAIL_BOUNDS['median_abs_iteration_error']:.0f} % + noise = "
          f"{100 * iteration_bound:.1f} %")

    record = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "statistic": a.statistic, "profile_spread": profile_spread,
              "host": os.uname().nodename, "cpus": os.cpu_count(),
              "load_average": os.getloadavg(), "steps": a.steps, "rows": rows,
              "targets": targets,
              "noise": {k: chosen[k] for k in ("drift", "run_noise", "noise", "attempt")},
              "attempts": [{k: m[k] for k in ("drift", "run_noise", "noise", "load_average")}
                           for m in attempts],
              "median_abs_iteration_error_bound": iteration_bound,
              "kendall_tau_resolved": {"value": tau_res, "pairs": res_pairs,
                                       "gap": RESOLVED_GAP}}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(record, f, indent=2)
    # Peak memory and the ops run do not depend on the machine's speed: judged in every case.
    broken = []
    if not max_mem <= FAIL_BOUNDS["max_abs_peak_memory_error"]:
        broken.append(f"max |peak-memory error| {100 * max_mem:.1f} % > "
                      f"{100 * FAIL_BOUNDS['max_abs_peak_memory_error']:.0f} %")
    for r in rows:
        worst = max(abs(e) for e in r["peak_memory_errors"])
        if r["hybrid"] and not worst <= HYBRID_BOUNDS["abs_peak_memory_error"]:
            broken.append(f"{r['plan']}: |peak-memory error| {100 * worst:.1f} % > "
                          f"{100 * HYBRID_BOUNDS['abs_peak_memory_error']:.0f} %")
    if not any(r["hybrid"] for r in rows):
        broken.append("no hybrid-sharding plan was run")
    if broken:
        raise SystemExit("accuracy outside the always-enforced bounds: " + "; ".join(broken))
    if not usable:
        # Neither a pass nor a fail: the measurement could not test the code. ctest shows it as
        # not run (SKIP_RETURN_CODE, tests/accuracy/CMakeLists.txt) with this reason.
        log(f"accuracy: cannot decide: in each of {len(attempts)} measurements either the "
            f"machine's own noise (profile drift + run-to-run spread, quietest "
            f"{100 * chosen['noise']:.1f} %) exceeded {100 * NOISE_LIMIT:.0f} %, which would "
            f"widen the iteration bound past the errors of a broken cost model, or other "
            f"processes competed for the {cores} cores (load average above {load_limit:.1f}); "
            f"noise " + ", ".join(f"{100 * m['noise']:.1f} %" for m in attempts) +
            "; load averages up to " + ", ".join(f"{m['max_load']:.1f}" for m in attempts))
        sys.exit(UNDECIDED)
    if not med_it <= iteration_bound:
        broken.append(f"median |iteration error| {100 * med_it:.1f} % > "
                      f"{100 * iteration_bound:.1f} % ({100 * FAIL_BOUNDS['median_abs_iteration_error']:.0f} % "
                      f"+ measured noise {100 * chosen['noise']:.1f} %)")
    if res_pairs < MIN_RESOLVED_PAIRS:
        broken.append(f"only {res_pairs} plan pairs differ by >= {100 * RESOLVED_GAP:.0f} % in "
                      f"simulated time (need {MIN_RESOLVED_PAIRS})")
    elif not (math.isfinite(tau_res) and tau_res > FAIL_BOUNDS["kendall_tau_resolved"]):
        broken.append(f"Kendall tau over the {res_pairs} resolved pairs {tau_res:.3f} <= "
                      f"{FAIL_BOUNDS['kendall_tau_resolved']}")
    # The hybrid plan's own errors (its cross-group all-reduce is a collective no other plan
    # has): the same always-enforced bounds, on that plan alone.
    for r in rows:
        if not r["hybrid"]:
            continue
        hybrid_bound = HYBRID_BOUNDS["abs_iteration_error"] + chosen["noise"]
        if not abs(r["iteration_error"]) <= hybrid_bound:
            broken.append(f"{r['plan']}: |iteration error| {100 * abs(r['iteration_error']):.1f} "
                          f"% > {100 * hybrid_bound:.1f} % (with the measured noise)")
    if broken:
        raise SystemExit("accuracy outside the always-enforced bounds: " + "; ".join(broken))
    if a.strict and not all(t["met"] for t in targets.values()):
        raise SystemExit("accuracy targets not met (--strict)")


if __name__ == "__main__":
    main()
