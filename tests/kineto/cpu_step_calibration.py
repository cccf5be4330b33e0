#!/usr/bin/env python3
"""A PyTorch profiler trace of a CPU training step calibrates a stack that predicts the other
steps (README.md here).

Trains a small GPT in PyTorch (the project's GPT: learned positions, pre-LN blocks with
multi-head attention and a GELU MLP, tied head, cross-entropy; the scenario below describes the
same model and job) for a few steps under torch.profiler with record_function annotations, then:

1. `cephalo calibrate stack --trace T --step <first profiled step>`: the stack fitted from that
   one step; its fitted iteration is the prediction of every step;
2. the other steps' measured times, read from the same trace here (ProfilerStep#N durations),
   not by cephalo: the prediction must be within 5 % of their median;
3. `cephalo compare SIM T`: the per-class times cephalo read from the trace equal the annotated
   ranges' durations this script sums itself.

The machine is shared and noisy: the steps of one run are compared with each other. When the
prediction misses the other steps only because the steps themselves differ (the calibration
step is off the others' median by more than the target allows, while the prediction reproduces
its own step), the run is repeated (3 attempts); if every attempt is that noisy the script says
so and exits 77 (ctest: skipped), never failing on load. What load cannot cause fails in every
case: a prediction off the time of its own step's annotated ranges by more than 1 % (the
simulator's composition of the classes), and steps whose median time outside the annotated
ranges passes 2.5 % (host work no factor sees).
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

TARGET = 0.05
LAYERS, HIDDEN, HEADS, VOCAB, SEQ, BATCH = 2, 128, 4, 256, 32, 4
# The least share of a core the training may get for its times to decide anything (below it
# the machine's other work sets the step times).
MIN_CPU_SHARE = 0.5


def device_rates():
    """One core as PyTorch computes on it, measured now (each the median of 5 repeats, per wall
    second): its fp32 GEMM rate (the device's peak FLOP/s) and the bytes per second of its
    elementwise ops (the device's memory bandwidth), as the catalog's CPU-core entry is the
    Eigen GEMM rate the project's own backend measured. Debian's torch uses a generic BLAS,
    several times slower than Eigen, and the machine's load slows every rate alike: rates
    measured in the same run keep the factors near what the stack itself adds."""
    import torch
    torch.set_num_threads(1)
    n, m = 256, 1 << 23  # 32 MB vectors: past the caches, as the optimizer's state is at scale
    a, b = torch.randn(n, n), torch.randn(n, n)
    x, y = torch.randn(m), torch.randn(m)
    flops, bandwidth = [], []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(10):
            a @ b
        flops.append(10 * 2 * n ** 3 / (time.perf_counter() - t))
        t = time.perf_counter()
        for _ in range(2):
            x.add_(y)  # reads two, writes one
        bandwidth.append(2 * 3 * 4 * m / (time.perf_counter() - t))
    # Medians: the load the training steps see is the typical one, not the quietest moment.
    return statistics.median(flops), statistics.median(bandwidth)


def scenario(peak_flops, bandwidth):
    return {
        "name": "kineto-cpu1",
        "description": "tests/kineto: one CPU core training a 2-layer GPT (hidden 128) in "
                       "PyTorch; the core's peak and bandwidth are PyTorch's rates measured by the test",
        "cluster": {"name": "cpu-1", "nodes": [{
            "name": "host", "gpus": [{"spec": {
                "name": "torch-cpu", "kind": "cpu", "memory": "4GiB",
                "memory_bandwidth": f"{bandwidth / 1e9:.3f}GB/s",
                "peak_fp32": f"{peak_flops / 1e9:.3f}GFLOPS",
                "pcie_generation": 3, "pcie_lanes": 16}, "count": 1, "threads": 1}],
            "intra_link": {"kind": "shm", "bandwidth": "5GB/s", "latency": "2us"}}]},
        "job": {
            "name": "gpt-kineto",
            "model": {"name": "gpt-kineto", "family": "gpt", "layers": LAYERS, "hidden": HIDDEN,
                      "heads": HEADS, "vocab_size": VOCAB, "max_positions": SEQ},
            "sequence_length": SEQ, "global_batch": BATCH,
            "precision": {"params": "fp32", "compute": "fp32", "reduce": "fp32"},
            "optimizer": {"kind": "adamw", "learning_rate": 1e-3},
            "implementation": {"attention": "eager", "fused_elementwise": False}}}


def plan():
    return {"version": 1, "scenario": "kineto-cpu1", "strategy": "hand-written",
            "accumulation": "layered", "offload": "none", "prefetch": True,
            "activation_checkpointing": "none",
            "ranks": [{"rank": 0, "node": 0, "gpu": "torch-cpu", "batch": BATCH, "micro_batch": BATCH,
                       "micro_batches": 1, "state_share": 1.0}]}


def train(trace_file, steps):
    import torch
    import torch.nn as nn
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    torch.manual_seed(0)
    torch.set_num_threads(1)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(HIDDEN), nn.LayerNorm(HIDDEN)
            self.qkv, self.proj = nn.Linear(HIDDEN, 3 * HIDDEN), nn.Linear(HIDDEN, HIDDEN)
            self.fc, self.out = nn.Linear(HIDDEN, 4 * HIDDEN), nn.Linear(4 * HIDDEN, HIDDEN)

        def forward(self, x):
            b, s, h = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(h, dim=2)
            q, k, v = (t.view(b, s, HEADS, h // HEADS).transpose(1, 2) for t in (q, k, v))
            att = (q @ k.transpose(-2, -1)) / math.sqrt(h // HEADS)
            mask = torch.ones(s, s, dtype=torch.bool).tril()
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            x = x + self.proj((att @ v).transpose(1, 2).reshape(b, s, h))
            return x + self.out(nn.functional.gelu(self.fc(self.ln2(x))))

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(VOCAB, HIDDEN), nn.Embedding(SEQ, HIDDEN)
            self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
            self.ln_f = nn.LayerNorm(HIDDEN)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
            for blk in self.blocks:
                x = blk(x)
            logits = self.ln_f(x) @ self.wte.weight.t()  # tied head
            return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))

    model = Gpt()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    data = torch.randint(0, VOCAB, (BATCH, SEQ + 1))
    idx, targets = data[:, :-1], data[:, 1:]

    def write(prof):
        prof.export_chrome_trace(trace_file)

    warmup = 2
    with profile(activities=[ProfilerActivity.CPU],
                 schedule=schedule(wait=0, warmup=warmup, active=steps),
                 on_trace_ready=write) as prof:
        for _ in range(warmup + steps):
            with record_function("## forward ##"):
                loss = model(idx, targets)
            with record_function("## backward ##"):
                loss.backward()
            with record_function("## optimizer ##"):
                opt.step()
                opt.zero_grad(set_to_none=True)
            prof.step()


def events_of(trace_file):
    with open(trace_file) as f:
        root = json.load(f)
    return root if isinstance(root, list) else root["traceEvents"]


def steps_of(events):
    steps = sorted((e for e in events if e.get("ph") == "X" and
                    e.get("name", "").startswith("ProfilerStep#")), key=lambda e: e["ts"])
    return [(e["name"], e["ts"], e["ts"] + e["dur"]) for e in steps]


def cephalo(cli, *args, allow=()):
    r = subprocess.run([cli, *args], capture_output=True, text=True, timeout=120)
    if r.returncode in allow:
        return r
    if r.returncode != 0:
        sys.exit("FAIL: cephalo " + " ".join(args) + f" exited {r.returncode}:\n{r.stderr}")
    return json.loads(r.stdout)


def attempt(cli, work, k, steps):
    trace = os.path.join(work, f"trace{k}.json")
    cpu, wall = time.process_time(), time.perf_counter()
    train(trace, steps)
    share = (time.process_time() - cpu) / (time.perf_counter() - wall)
    events = events_of(trace)
    profiled = steps_of(events)
    if len(profiled) != steps:
        sys.exit(f"FAIL: {trace} has {len(profiled)} ProfilerStep ranges, expected {steps}")
    cal_name, cal_a, cal_b = profiled[0]

    # The per-class times cephalo read, against the annotated ranges summed here.
    sim = f"{work}/sim{k}.json"
    with open(sim, "w") as f:
        json.dump(cephalo(cli, "simulate", "--scenario", f"{work}/scenario.json", "--plan",
                          f"{work}/plan.json", "--json", "--ops"), f)
    cmp = cephalo(cli, "compare", sim, trace, "--scenario", f"{work}/scenario.json", "--plan",
                  f"{work}/plan.json", "--step", cal_name, "--json")
    for cls, label in (("forward", "## forward ##"), ("backward", "## backward ##"),
                       ("optimizer", "## optimizer ##")):
        mine = sum(e["dur"] for e in events if e.get("name") == label and
                   cal_a <= e["ts"] < cal_b) * 1e-6
        read = next((c["measured_s"] for c in cmp["classes"] if c["class"] == cls), None)
        if read is None or abs(read - mine) > 2e-6:
            sys.exit(f"FAIL: {trace} {cal_name}: cephalo read {read} s of {cls}, the annotated "
                     f"ranges sum to {mine} s")

    fit = cephalo(cli, "calibrate", "stack", "--scenario", f"{work}/scenario.json", "--plan",
                  f"{work}/plan.json", "--trace", trace, "--step", cal_name, "-o",
                  f"{work}/stack{k}.json", "--json", allow=(3,))
    if isinstance(fit, subprocess.CompletedProcess):
        # Load can cause three refusals: a training that got too little of a core; a step
        # faster than the roofline of the rates measured just before it (the machine's other
        # work slowed the rate measurement and then eased off); and, on a machine with more
        # runnable work than cores, a factor outside the allowed range (one preemption in the
        # optimizer's sub-millisecond phase makes it tens of times as long). Any other refusal,
        # and any refusal on a machine that is not overloaded, fails.
        overloaded = os.getloadavg()[0] > (os.cpu_count() or 1)
        by_load = ("faster than the roofline" in fit.stderr or
                   (overloaded and "factor of" in fit.stderr and "outside [" in fit.stderr))
        if share >= MIN_CPU_SHARE and not by_load:
            sys.exit(f"FAIL: cephalo calibrate stack refused {trace} with {100 * share:.0f} % of "
                     f"a core:\n{fit.stderr}")
        print(f"attempt {k}: the training got {100 * share:.0f} % of a core at load "
              f"{os.getloadavg()[0]:.1f}; calibrate refused its step ({fit.stderr.strip()})",
              flush=True)
        return None, None, None, share
    predicted = fit["fitted_iteration_s"]
    for factor in ("compute", "optimizer"):
        if not fit["stack"]["factors"][factor]["identified"]:
            sys.exit(f"FAIL: the {factor} factor was not identified from {trace}: {fit['notes']}")

    def annotated(a, b):
        return sum(e["dur"] for e in events if e.get("name") in
                   ("## forward ##", "## backward ##", "## optimizer ##") and a <= e["ts"] < b)

    cal = (cal_b - cal_a) * 1e-6
    cal_classified = annotated(cal_a, cal_b) * 1e-6
    others = [(b - a) * 1e-6 for _, a, b in profiled[1:]]
    outside = statistics.median(1 - annotated(a, b) / (b - a) for _, a, b in profiled)
    median = statistics.median(others)
    error = (predicted - median) / median
    composition = (predicted - cal_classified) / cal
    # How far the step fitted on already is from the others, and how much the others spread.
    noise = abs(cal - median) / median + (max(others) - min(others)) / median / 2
    print(f"attempt {k}: {cal_name} {cal * 1e3:.2f} ms (fitted on; {cal_classified * 1e3:.2f} "
          f"ms in the annotated ranges); predicted {predicted * 1e3:.2f} ms; other steps median "
          f"{median * 1e3:.2f} ms, {min(others) * 1e3:.2f}..{max(others) * 1e3:.2f}; error "
          f"{100 * error:+.2f} %; noise {100 * noise:.1f} %; median time outside the ranges "
          f"{100 * outside:.2f} %; the training got {100 * share:.0f} % of a core; factors compute "
          f"{fit['stack']['factors']['compute']['value']:.3f} optimizer "
          f"{fit['stack']['factors']['optimizer']['value']:.3f}", flush=True)
    return error, composition, outside, share


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cephalo", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--attempts", type=int, default=3)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    with open(f"{args.work}/plan.json", "w") as f:
        json.dump(plan(), f, indent=1)
    seen = []
    for k in range(args.attempts):
        peak, bandwidth = device_rates()
        print(f"attempt {k}: PyTorch on one core: fp32 GEMM {peak / 1e9:.2f} GFLOP/s, "
              f"elementwise {bandwidth / 1e9:.2f} GB/s (per wall second)")
        with open(f"{args.work}/scenario.json", "w") as f:
            json.dump(scenario(peak, bandwidth), f, indent=1)
        error, composition, outside, share = attempt(args.cephalo, args.work, k, args.steps)
        if error is None:
            seen.append(f"calibration refused at {100 * share:.0f} % of a core (load)")
            continue
        if abs(composition) > 0.01:
            sys.exit(f"FAIL: the stack fitted on one step predicts {100 * composition:+.2f} % "
                     "of that step off the time of its annotated ranges (bound 1 %): the "
                     "simulator does not compose the classes as the trace measured them")
        if outside > TARGET / 2:
            sys.exit(f"FAIL: the steps spend {100 * outside:.1f} % (median) outside the "
                     f"annotated ranges (bound {100 * TARGET / 2:.1f} %): host work no factor sees")
        if abs(error) <= TARGET:
            print(f"PASS: the other steps predicted within {100 * abs(error):.2f} % "
                  f"(target {100 * TARGET:.0f} %)")
            return 0
        seen.append(f"error {100 * error:+.1f} % at {100 * share:.0f} % of a core")
        time.sleep(1)
    print("cannot decide: in every attempt the steps of one run differed by more than the "
          "target (machine load): " + "; ".join(seen) + f"; load {os.getloadavg()[0]:.1f}")
    return 77


if __name__ == "__main__":
    sys.exit(main())
