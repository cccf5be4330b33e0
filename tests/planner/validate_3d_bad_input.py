#!/usr/bin/python3
"""scripts/validate-3d refuses a bad published-point file (--check FILE or --data FILE) naming
the file, the JSON path, the value and what was expected, with exit status 1, before it runs
anything. Each case breaks one field of the shipped check set.

    validate_3d_bad_input.py SCRIPT CHECK_FILE OUT_DIR
"""
import copy
import json
import os
import subprocess
import sys


def main():
    script, check_file, out = sys.argv[1:4]
    os.makedirs(out, exist_ok=True)
    good = json.load(open(check_file))
    cases = []

    def case(name, mutate, *says):
        doc = copy.deepcopy(good)
        text = mutate(doc)
        path = os.path.join(out, name + ".json")
        with open(path, "w") as f:
            f.write(text if isinstance(text, str) else json.dumps(doc))
        cases.append((path, says))

    case("missing-tp", lambda d: d["points"][1]["parallelism"].pop("tp"),
         "$.points[1].parallelism.tp", "missing")
    case("zero-tp", lambda d: d["points"][0]["parallelism"].update(tp=0),
         "$.points[0].parallelism.tp", "0", "integer >= 1")
    case("product", lambda d: d["points"][2]["parallelism"].update(dp=3),
         "$.points[2].parallelism", "= 192", "64 GPUs")
    case("gpu", lambda d: d["points"][0]["cluster"].update(gpu_type="A100-SXM4-96GB"),
         "$.points[0].cluster.gpu_type", "A100-SXM4-96GB", "A100-SXM4-80GB")
    case("recompute", lambda d: d["points"][3].update(recompute="sometimes"),
         "$.points[3].recompute", "sometimes", "full, selective or none")
    case("time", lambda d: d["points"][4]["measured"].update(iteration_s=-1),
         "$.points[4].measured.iteration_s", "-1", "> 0")
    # The fields the H100 NeMo points use (optional in the A100 ones): (name, point, the keys
    # down to the field, its bad value, what the refusal must say).
    for name, i, keys, value, says in (
            ("fp8", 0, ["precision"], "fp8 hybrid", ("fp16 or bf16", "FP8")),
            ("context-parallel", 1, ["parallelism", "cp"], 2, ("no context parallelism",)),
            ("activation", 2, ["model", "activation"], "swish", ("squared-relu",)),
            ("kv-heads", 0, ["model", "kv_heads"], 5, ("divisor of heads",)),
            ("dp-overlap", 1, ["parallelism", "dp_overlap"], "always", ("per-unit",)),
            ("optimizer-dtype", 0, ["optimizer_dtype"], "fp8", ("fp32 or bf16",)),
            ("tp-overlap", 0, ["parallelism", "tp_comm_overlap"], "yes", ("true or false",)),
            ("flash-kernel", 0, ["flash_kernel"], "fa3", ("fa3", "flash-attn", "cudnn")),
            # The A100 points ran Megatron's fused softmax (eager attention): no flash kernel.
            ("flash-kernel-without-flash", 0, ["flash_kernel"], "cudnn",
             ("unless the point's attention is flash",)),
            ("wgrad-path", 1, ["parallelism", "weight_gradients"], "fp32_master",
             ("fp32_master", "autocast", "main_grad_compute_dtype", "fused_main_grad")),
            # Point 0 runs without sequence parallelism: Transformer Engine cannot overlap it.
            ("tp-overlap-without-sp", 0, ["parallelism", "tp_comm_overlap"], True,
             ("without sequence parallelism",)),
            ("wgrad-deferral", 2, ["parallelism", "defer_embedding_wgrad_compute"], "yes",
             ("true or false",)),
            # Point 0 has no pipeline (PP 1): Megatron-Core has no flush to defer into.
            ("wgrad-deferral-without-pipeline", 0,
             ["parallelism", "defer_embedding_wgrad_compute"], True, ("PP 1",)),
            # Point 2 does not defer: a limit alone would price nothing.
            ("wgrad-deferral-limit-alone", 2, ["parallelism", "wgrad_deferral_limit"], 4,
             ("defer_embedding_wgrad_compute true",))):
        def mutate(d, i=i, keys=keys, value=value):
            node = d["points"][i]
            for k in keys[:-1]:
                node = node[k]
            node[keys[-1]] = value
        case(name, mutate, "$.points[%d].%s" % (i, ".".join(keys)), json.dumps(value), *says)
    def negative_limit(d):
        d["points"][2]["parallelism"].update(defer_embedding_wgrad_compute=True,
                                             wgrad_deferral_limit=-1)
    case("wgrad-deferral-limit", negative_limit, "$.points[2].parallelism.wgrad_deferral_limit",
         "-1", "integer >= 0")
    # What Python's json module takes and the project's reader refuses (scripts/check_json.py):
    # before, Infinity was a measured time > 0 and the second of a key given twice won.
    case("infinite-time", lambda d: d["points"][4]["measured"].update(iteration_s=float("inf")),
         "not a readable JSON file", "Infinity", "finite number")
    case("nan-time", lambda d: d["points"][4]["measured"].update(iteration_s=float("nan")),
         "not a readable JSON file", "NaN")
    case("duplicate-key", lambda d: json.dumps(d).replace('"tp": ', '"tp": 1, "tp": ', 1),
         "not a readable JSON file", 'key "tp" given twice')
    case("no-points", lambda d: d.update(points=[]), "$.points", "non-empty list")
    case("not-json", lambda d: "{\"points\": [", "not a readable JSON file")
    failed = 0
    for path, says in cases:
        r = subprocess.run([sys.executable, script, "--cephalo", "/nonexistent/cephalo",
                            "--check", path, "--out", out], capture_output=True, text=True)
        text = r.stdout + r.stderr
        missing = [w for w in (os.path.basename(path),) + says if w not in text]
        if r.returncode != 1 or missing:
            failed += 1
            print("FAIL %s: exit %d, missing %s in:\n%s" % (path, r.returncode, missing, text))
        else:
            print("ok   %s: %s" % (os.path.basename(path), text.strip()))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
