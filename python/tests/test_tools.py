"""pytest suite of the cephalo Python module, part two (ctest label `python`): describe,
predict, compare, sweep, the DataFrames, scenario objects, the CLI parity of every command and
calibrate_stack; part one (test_cephalo.py) loads, validates, plans and simulates."""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import threading
import time

import pytest

import cephalo

from support import CLI, CPU2, CPU2_PLAN, DEFAULT, MODELS, ROOT, SCENARIOS, cli  # noqa: F401


def test_describe_model_of_a_config_and_of_a_catalog_name():
    llama = cephalo.describe_model(MODELS / "meta-llama-3-8b.json")
    assert llama["total_parameters"] == 8_030_261_248
    assert llama["hf_model_type"] == "llama" and llama["kv_heads"] == 8
    assert cephalo.describe_model("gpt-2.7b")["layers"] == 32
    cli_record = json.loads(cli("describe", "model", MODELS / "gpt2.json", "--json"))
    assert cli_record == cephalo.describe_model(MODELS / "gpt2.json")
    with pytest.raises(cephalo.ValidationError) as info:
        cephalo.describe_model(MODELS / "mixtral-8x7b-v0.1.json")
    assert info.value.json_path == "model_type" and "experts" in info.value.expected


def test_plan_and_simulate_a_job_whose_model_is_a_config(tmp_path):
    shutil.copy(MODELS / "qwen2-0.5b.json", tmp_path / "config.json")
    scenario = {"name": "qwen", "cluster": str(SCENARIOS / "clusters/paper-4gpu.json"),
                "job": {"model": {"hf_config": "config.json"}, "sequence_length": 1024,
                        "global_batch": 16}}
    s = cephalo.load_scenario(scenario, base_dir=tmp_path)
    assert s.model == tmp_path.name  # a config.json is named after its folder
    p = cephalo.plan(s, strategy="optimal", compute_model="roofline")
    r = cephalo.simulate(s, p, compute_model="roofline")
    assert r["samples_per_s"] > 0 and len(r.ranks_frame()) == 4


# -- predictions, compare, sweep ----------------------------------------------------------

def test_predict_memory_equals_the_cli(tmp_path, default_plan):
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(default_plan))
    got = cephalo.predict_memory(DEFAULT, plan_file)
    expected = json.loads(cli("predict", "memory", "--scenario", DEFAULT, "--plan", plan_file,
                              "--json"))
    assert got == expected
    assert got.ranks_frame()["total_bytes"].gt(0).all()


@pytest.mark.parametrize("gpu, model, seq, dtype, micro_batch, source", [
    ("l4", "deepspeedgpt_2.7b", 512, "fp16", 4, "auto"),   # a profile row (with its detail)
    ("p100", "gpt-2.7b", 512, "fp32", 30, "auto"),        # beyond the profiled micro-batches
    ("h100", "llama3-8b", 2048, "bf16", 2, "roofline"),
    ("a100", "bert-large", 512, "fp16", 8, "calibrated"),
])
def test_predict_layer_equals_the_cli(gpu, model, seq, dtype, micro_batch, source):
    got = cephalo.predict_layer(gpu, model, seq, micro_batch, dtype=dtype, source=source)
    expected = json.loads(cli("predict", "layer", "--gpu", gpu, "--model", model, "--seq", seq,
                              "--dtype", dtype, "--micro-batch", micro_batch, "--compute-model", source,
                              "--json"))
    assert got == expected
    assert got["forward_ms"] > 0 and got["backward_ms"] > got["forward_ms"] * 0.5


def test_predict_layer_ops_equals_the_cli_and_adds_up():
    got = cephalo.predict_layer("h100", "gpt-2.7b", 2048, 2, dtype="bf16", source="calibrated",
                                flash_kernel="cudnn", ops=True)
    expected = json.loads(cli("predict", "layer", "--gpu", "h100", "--model", "gpt-2.7b", "--seq",
                              2048, "--dtype", "bf16", "--micro-batch", 2, "--compute-model",
                              "calibrated", "--flash-kernel", "cudnn", "--ops", "--json"))
    assert got == expected
    assert got["implementation"]["flash_kernel"] == "cudnn"
    frame = got.op_classes_frame()
    assert list(frame["name"]) == ["GEMMs", "attention core", "elementwise", "norms"]
    assert frame["forward_ms"].sum() == pytest.approx(got["forward_ms"], abs=1e-6)
    assert frame["backward_ms"].sum() == pytest.approx(got["backward_ms"], abs=1e-6)
    with pytest.raises(cephalo.ValidationError) as info:
        cephalo.predict_layer("h100", "gpt-2.7b", 2048, 2, attention="eager", flash_kernel="cudnn")
    assert info.value.json_path == "flash_kernel"


def test_predict_layer_of_a_config_equals_the_cli(tmp_path):
    config = MODELS / "meta-llama-3-8b.json"
    got = cephalo.predict_layer("a100", config, 2048, 1, dtype="bf16")
    expected = json.loads(cli("predict", "layer", "--gpu", "a100", "--model", config, "--seq",
                              2048, "--dtype", "bf16", "--micro-batch", 1, "--json"))
    assert got == expected
    assert got["model"] == "meta-llama-3-8b"
    # Same architecture as the catalog entry made from that config: the same prediction.
    catalog = cephalo.predict_layer("a100", "llama3-8b", 2048, 1, dtype="bf16")
    assert got["forward_ms"] == pytest.approx(catalog["forward_ms"], rel=1e-12)
    with pytest.raises(cephalo.IoError):
        cephalo.predict_layer("a100", tmp_path / "missing.json", 2048, 1)


def test_predict_layer_errors_name_the_keyword():
    cases = [(dict(micro_batch=0), "micro_batch", "0"),
             (dict(seq=65), "seq", "65"),             # gpt-tiny has 64 learned positions
             (dict(dtype="fp8"), "dtype", "fp8")]
    for change, key, value in cases:
        args = dict(gpu="l4", model="gpt-tiny", seq=32, micro_batch=1) | change
        with pytest.raises(cephalo.ValidationError) as info:
            cephalo.predict_layer(**args)
        e = info.value
        assert (e.file, e.json_path, e.value) == ("arguments", key, value), e
        assert e.expected
        if key == "seq":
            assert "64" in e.expected
    with pytest.raises(cephalo.NotFoundError):
        cephalo.predict_layer("l44", "gpt-tiny", 32, 1)
    with pytest.raises(cephalo.NotFoundError):
        cephalo.predict_layer("l4", "gtp-tiny", 32, 1)
    # The CLI refuses the same sequence with the same expectation, naming the flag.
    done = subprocess.run([CLI, "predict", "layer", "--gpu", "l4", "--model", "gpt-tiny",
                           "--seq", "65", "--micro-batch", "1"], capture_output=True, text=True)
    assert done.returncode == 2 and "--seq" in done.stderr + done.stdout


def test_predict_layer_prices_the_implementation_it_is_given():
    common = dict(gpu="a100", model="gpt-2.7b", seq=2048, micro_batch=2, dtype="fp32",
                  source="calibrated")
    got = cephalo.predict_layer(**common, attention="eager", fused_elementwise=False,
                                framework="deepspeed_zero3")
    expected = json.loads(cli("predict", "layer", "--gpu", "a100", "--model", "gpt-2.7b",
                              "--seq", 2048, "--micro-batch", 2, "--dtype", "fp32", "--compute-model",
                              "calibrated", "--attention", "eager", "--fused-elementwise",
                              "false", "--framework", "deepspeed_zero3", "--json"))
    assert got == expected
    assert got["implementation"] == {"attention": "eager", "fused_elementwise": False,
                                     "compiled": False, "framework": "deepspeed_zero3"}
    flash = cephalo.predict_layer(**common)
    assert got["forward_ms"] > 1.1 * flash["forward_ms"]
    compiled = cephalo.predict_layer(**common, attention="eager", compiled=True)
    assert compiled["implementation"]["compiled"] is True
    for change, key in [(dict(framework="megatron"), "framework"),
                        (dict(attention="paged"), "attention"),
                        (dict(compiled=True, fused_elementwise=False), "fused_elementwise"),
                        (dict(compiled="yes"), "compiled")]:
        with pytest.raises(cephalo.ValidationError) as info:
            cephalo.predict_layer(**common, **change)
        assert info.value.json_path == key, info.value
    with pytest.raises(cephalo.ValidationError) as info:
        cephalo.predict_layer(**common, framework="megatron")
    assert "deepspeed_zero3" in info.value.expected


@pytest.mark.parametrize("kind, size, flags, kwargs", [
    ("all-reduce", "64MiB", [], {}),
    ("all-gather", "1MiB", ["--ranks", "0,1", "--shares", "0.25,0.75", "--uneven", "padded"],
     dict(ranks=[0, 1], shares=[0.25, 0.75], uneven="padded")),
    ("reduce-scatter", 3 << 20, ["--shares", "0.1,0.2,0.3,0.4"],
     dict(shares=[0.1, 0.2, 0.3, 0.4])),
])
def test_predict_collective_equals_the_cli(kind, size, flags, kwargs):
    got = cephalo.predict_collective(DEFAULT, kind, size, **kwargs)
    expected = json.loads(cli("predict", "collective", "--scenario", DEFAULT, "--kind", kind,
                              "--bytes", size, *flags, "--json"))
    assert got == expected
    assert got["seconds"] > 0 and got["kind"] == kind


def test_predict_collective_errors_name_the_keyword():
    cases = [(dict(bytes="-5"), "bytes"),
             (dict(shares=[0.5, 0.2, 0.2, 0.2]), "shares"),   # sums to 1.1
             (dict(shares=[0.5, 0.5]), "shares"),             # two shares for four ranks
             (dict(ranks=[0, 4]), "ranks"),                   # four ranks: 0..3
             (dict(ranks=[0.5]), "ranks"),
             (dict(uneven="ring"), "uneven")]
    for change, key in cases:
        args = dict(kind="all-gather", bytes="1MiB") | change
        with pytest.raises(cephalo.ValidationError) as info:
            cephalo.predict_collective(DEFAULT, **args)
        assert (info.value.file, info.value.json_path) == ("arguments", key), info.value
    with pytest.raises(cephalo.ValidationError) as info:
        cephalo.predict_collective(DEFAULT, "all-gather", "1MiB", shares=[0.5, 0.2, 0.2, 0.2])
    assert "sum" in info.value.expected
    with pytest.raises(cephalo.NotFoundError):
        cephalo.predict_collective(DEFAULT, "gather", "1MiB")
    with pytest.raises(cephalo.IoError):
        cephalo.predict_collective(DEFAULT, "all-gather", "1MiB", sweep="/no/such/sweep.json")


def test_compare_two_results(tmp_path, default_plan):
    sim = cephalo.simulate(DEFAULT, default_plan, ops=True, compute_model="roofline")
    other = cephalo.simulate(DEFAULT, default_plan, ops=True, compute_model="calibrated")
    other["source"] = "cpu"  # stands in for a measured RunResult (same schema)
    record = cephalo.compare(sim, other, scenario=DEFAULT, plan=default_plan)
    metrics = {m["metric"] for m in record["end_to_end"]}
    assert "iteration_time_s" in metrics
    (tmp_path / "a.json").write_text(json.dumps(sim))
    (tmp_path / "b.json").write_text(json.dumps(other))
    expected = json.loads(cli("compare", tmp_path / "a.json", tmp_path / "b.json", "--json"))
    assert cephalo.compare(tmp_path / "a.json", tmp_path / "b.json") == expected
    with pytest.raises(ValueError):
        cephalo.compare(sim, other, scenario=DEFAULT)


def test_sweep_reports_progress_and_equals_the_cli():
    spec = ROOT / "notebooks/inputs/small-mixes.json"  # the notebook's CI sweep
    seen = []
    record = cephalo.sweep(spec, progress=lambda done, total, mix: seen.append((done, total)))
    assert seen and seen[-1][0] == seen[-1][1] == len(record["mixes"])
    expected = json.loads(cli("sweep", "--spec", spec, "--json", "--quiet"))
    for r in record["mixes"] + expected["mixes"]:
        r.pop("planning_s")  # wall time of the planner
    assert record == expected


# -- parity with the CLI: op names, traces, sweep and memory frames, scenarios, version ------

def cli_op_names(scenario, plan_file):
    """Op id -> name from the table `cephalo simulate --ops` prints (no --json)."""
    names = {}
    for line in cli("simulate", "--scenario", scenario, "--plan", plan_file, "--ops").splitlines():
        m = re.match(r"\s*(\d+)\s+(\S.*?)\s+[-+.0-9eE]+ ms\s+[-+.0-9eE]+ ms\s*$", line)
        if m:
            names[int(m.group(1))] = m.group(2)
    return names


def test_ops_frame_says_what_each_op_is(tmp_path):
    pandas = pytest.importorskip("pandas")
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(cli("plan", "--scenario", DEFAULT, "--strategy", "optimal", "--json"))
    result = cephalo.simulate(DEFAULT, plan_file, ops=True)
    frame = result.ops_frame()
    assert list(frame.columns) == ["id", "name", "kind", "rank", "stream", "unit", "micro_batch",
                                   "micro_batch_samples", "start_s", "end_s", "duration_s",
                                   "flops", "bytes"]
    assert len(frame) == len(result["ops"]) > 0
    # The names are the CLI's, op by op.
    assert dict(zip(frame["id"], frame["name"])) == cli_op_names(DEFAULT, plan_file)
    assert set(frame["rank"]) == {0, 1, 2, 3} and set(frame["stream"]) <= {
        "compute", "comm", "d2h", "h2d"}
    forward = frame[frame["kind"] == "forward"]
    assert len(forward) and (forward["unit"] >= 0).all() and (forward["micro_batch"] >= 0).all()
    layers = forward[(forward["unit"] >= 1) & (forward["unit"] <= 32)]  # gpt-2.7b: 32 layers
    assert (forward["micro_batch_samples"] >= 1).all() and (layers["flops"] > 0).all()
    assert set(forward["unit"]) == set(range(34))  # embedding, 32 layers, head
    step = frame[frame["kind"] == "optimizer_step"]
    assert len(step) == 4 and (step["unit"] == -1).all() and (step["micro_batch"] == -1).all()
    gathers = frame[frame["kind"].str.startswith("all_gather")]
    assert len(gathers) and (gathers["bytes"] > 0).all() and (gathers["stream"] == "comm").all()
    assert (frame["duration_s"] == frame["end_s"] - frame["start_s"]).all()
    # Each name carries its rank and unit ("F u3 mb1 r0").
    for row in forward.head(20).itertuples():
        assert f"u{row.unit}" in row.name and row.name.endswith(f"r{row.rank}")
    # A record read back from its JSON (or a RunResult) names its ops from scenario and plan.
    plain = cephalo.Record(json.loads(json.dumps(result)))
    assert list(plain.ops_frame().columns) == ["id", "start_s", "end_s", "duration_s"]
    pandas.testing.assert_frame_equal(plain.ops_frame(DEFAULT, plan_file), frame)
    with pytest.raises(ValueError):
        plain.ops_frame(scenario=DEFAULT)


def test_simulate_writes_the_clis_trace(tmp_path):
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(cli("plan", "--scenario", DEFAULT, "--strategy", "even", "--json"))
    cli("simulate", "--scenario", DEFAULT, "--plan", plan_file, "--trace", tmp_path / "cli.json")
    record = cephalo.simulate(DEFAULT, plan_file, trace=tmp_path / "py.json")
    assert (tmp_path / "py.json").read_bytes() == (tmp_path / "cli.json").read_bytes()
    events = json.loads((tmp_path / "py.json").read_text())["traceEvents"]
    assert any(e.get("ph") == "X" for e in events) and any(e.get("ph") == "C" for e in events)
    # The trace changes nothing in the record but the replay's work: a trace needs the full
    # replay, which processes more events than the replay by class of identical ranks.
    plain = cephalo.simulate(DEFAULT, plan_file)
    assert record.pop("events") > plain.pop("events") and record == plain
    # An output that is an input is refused before the replay, and the input is untouched.
    before = plan_file.read_bytes()
    with pytest.raises(cephalo.IoError) as info:
        cephalo.simulate(DEFAULT, plan_file, trace=plan_file)
    assert "trace" in str(info.value)
    assert plan_file.read_bytes() == before
    with pytest.raises(cephalo.IoError):
        cephalo.simulate(DEFAULT, plan_file, trace=tmp_path / "no-such-dir" / "t.json")


def test_sweep_frame_has_nan_where_a_mix_is_infeasible(tmp_path):
    pandas = pytest.importorskip("pandas")
    # One T4 cannot hold a 2.7B-parameter model's training state; four A100-80GB can.
    spec = {"name": "nan-check",
            "pool": [{"gpu": "t4", "max_count": 1}, {"gpu": "a100x80", "max_count": 4, "step": 4}],
            "node": {"gpus_per_node": 4,
                     "intra_link": {"kind": "pcie", "generation": 4, "lanes": 16},
                     "nic": {"kind": "ethernet", "bandwidth": "100Gbit/s", "latency": "10us"}},
            "job": {"model": "gpt-2.7b", "sequence_length": 512, "global_batch": 16},
            "strategy": "even"}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    record = cephalo.sweep(tmp_path / "spec.json")
    frame = record.mixes_frame()
    assert len(frame) == len(record["mixes"]) == 3
    assert isinstance(frame, pandas.DataFrame) and record.to_pandas("mixes").equals(frame)
    infeasible = frame[~frame["feasible"]]
    feasible = frame[frame["feasible"]]
    assert len(infeasible) and len(feasible)
    assert infeasible["samples_per_s"].isna().all()
    assert infeasible["samples_per_dollar"].isna().all()
    assert infeasible["tokens_per_dollar"].isna().all()
    # Tokens per dollar is samples per dollar at the job's sequence length (512).
    assert (feasible["tokens_per_dollar"] == feasible["samples_per_dollar"] * 512).all()
    assert (infeasible["error"] != "").all()
    # The lone T4 cannot even be planned: no planner estimate either.
    assert infeasible["predicted_samples_per_s"].isna().all()
    assert (feasible["predicted_samples_per_s"] > 0).all()
    by_mix = {m["mix"]: m for m in record["mixes"]}
    for row in feasible.itertuples():
        assert row.samples_per_s == by_mix[row.mix]["samples_per_s"] > 0
    # The record itself stays the CLI's (0 where the frame says NaN).
    assert all(m["samples_per_s"] == 0 for m in record["mixes"] if not m["feasible"])
    assert infeasible["tokens_per_s"].isna().all()
    # Throughput statistics skip what does not exist rather than averaging in zeros.
    assert frame["samples_per_s"].mean() == feasible["samples_per_s"].mean()


def test_sweep_rows_name_their_network_and_plan_family(tmp_path):
    pytest.importorskip("pandas")
    # Two A6000 nodes on two network options; parallelism "3d" keeps splits only.
    nic = {"kind": "ethernet", "latency": "10us"}
    spec = {"name": "networks",
            "pool": [{"gpu": "a6000", "max_count": 4, "min_count": 4}],
            "node": {"gpus_per_node": 2,
                     "intra_link": {"kind": "pcie", "generation": 4, "lanes": 16}},
            "networks": [{"name": "10G", "nic": dict(nic, bandwidth="10Gbit/s")},
                         {"name": "100G", "nic": dict(nic, bandwidth="100Gbit/s"),
                          "price_per_node_hour": 1.0}],
            "job": {"model": "gpt-1.3b", "sequence_length": 512, "global_batch": 16},
            "parallelism": "3d"}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    record = cephalo.sweep(tmp_path / "spec.json")
    frame = record.mixes_frame()
    assert list(frame["network_name"]) == ["10G", "100G"]
    assert (frame["family"] == "3d").all() and frame["feasible"].all()
    # The faster network costs its price per node on top of the GPUs'.
    assert frame["cost_per_hour"][1] == pytest.approx(frame["cost_per_hour"][0] + 2 * 1.0)
    assert (frame["tokens_per_s"] == frame["samples_per_s"] * 512).all()
    assert record["split_search"]["finalists"] >= 1


def test_memory_frame_has_one_column_per_term(default_plan):
    pytest.importorskip("pandas")
    record = cephalo.predict_memory(DEFAULT, default_plan)
    frame = record.ranks_frame()
    assert "terms_bytes" not in frame.columns
    assert not any(isinstance(v, (dict, list)) for v in frame.to_numpy().ravel())
    terms = record["ranks"][0]["terms_bytes"]
    assert len(terms) > 3
    for term, value in terms.items():
        assert frame.loc[0, f"{term}_bytes"] == value
    assert {"rank", "gpu", "total_bytes", "capacity_bytes", "headroom_bytes", "fits"} <= set(
        frame.columns)
    term_columns = [f"{t}_bytes" for t in terms]
    assert frame[term_columns].sum(axis=1).to_numpy() == pytest.approx(
        frame["total_bytes"].to_numpy(), rel=1e-9)


def scenarios_to_round_trip(tmp_path):
    shutil.copy(MODELS / "qwen2-0.5b.json", tmp_path / "config.json")
    from_config = cephalo.load_scenario(
        {"name": "qwen", "cluster": str(SCENARIOS / "clusters/paper-4gpu.json"),
         "job": {"model": {"hf_config": "config.json"}, "sequence_length": 1024,
                 "global_batch": 16}}, base_dir=tmp_path)
    return [cephalo.load_scenario(DEFAULT), cephalo.load_scenario(CPU2), from_config]


def test_scenario_round_trips_pickles_and_copies(tmp_path):
    import copy
    import pickle
    for s in scenarios_to_round_trip(tmp_path):
        text = s.to_json()
        again = cephalo.load_scenario(json.loads(text))  # was "job.model_spec: unknown key"
        assert again == s and again.to_json() == text
        unpickled = pickle.loads(pickle.dumps(s))
        assert isinstance(unpickled, cephalo.Scenario) and unpickled == s
        assert unpickled.name == s.name and unpickled.model == s.model
        for c in (copy.copy(s), copy.deepcopy(s)):
            assert c is not s and c == s
        plan = cephalo.plan(s, strategy="even", compute_model="roofline")
        assert cephalo.simulate(unpickled, plan, compute_model="roofline", text=True) == \
            cephalo.simulate(s, plan, compute_model="roofline", text=True)
    assert cephalo.load_scenario(DEFAULT) != cephalo.load_scenario(CPU2)


def test_scenario_repr_names_model_gpus_and_batch():
    s = cephalo.load_scenario(DEFAULT)
    assert repr(s) == ("<cephalo.Scenario 'paper-gpt2.7b': gpt-2.7b, sequence 512, "
                       "global batch 64, 4 GPUs (2x L4, RTX-A6000, P40)>")
    assert s.gpus == ["L4", "L4", "RTX-A6000", "P40"]
    assert (s.sequence_length, s.global_batch) == (512, 64)


def test_version_is_the_clis():
    assert re.fullmatch(r"\d+\.\d+\.\d+", cephalo.__version__)
    assert cli("--version").split() == ["cephalo", cephalo.__version__]
    pyproject = pathlib.Path(cephalo.__file__).parents[1] / "pyproject.toml"
    if pyproject.exists():  # the package in the build tree (not an installed copy)
        assert f'version = "{cephalo.__version__}"' in pyproject.read_text()


def test_public_functions_document_their_units():
    # Every public callable says what it does; those returning timed or sized records say in
    # which units.
    for name in cephalo.__all__:
        obj = getattr(cephalo, name)
        if callable(obj):
            assert obj.__doc__ and len(obj.__doc__) > 40, name
    for name, units in [("simulate", ("seconds", "bytes")), ("predict_memory", ("bytes",)),
                        ("sweep", ("samples/s",)), ("predict_layer", ("ms",)),
                        ("predict_collective", ("seconds",)), ("plan", ("seconds",))]:
        doc = getattr(cephalo, name).__doc__
        for unit in units:
            assert unit in doc, (name, unit)
    for view in ("ranks_frame", "ops_frame", "mixes_frame"):
        assert "seconds" in getattr(cephalo.Record, view).__doc__, view


# Every CLI command, down to its subcommands, and what stands for it in Python; a command added
# to the CLI without an entry here fails the test below, and the test after it runs each pair
# on the same inputs and compares their records.
PYTHON_EQUIVALENTS = {
    "describe": "describe",           # gpus | models | model NAME | SCENARIO
    "validate": "validate_files",     # and validate(scenario, plan) for loaded objects
    "plan": "plan",                   # parallelism fsdp | 3d | auto
    "sweep": "sweep",
    "predict layer": "predict_layer",
    "predict memory": "predict_memory",
    "predict collective": "predict_collective",
    "predict 3d": "predict_3d",
    "simulate": "simulate",
    "compare": "compare",
    "calibrate stack": "calibrate_stack",
    "run": None,      # the backend runs one process per rank under mpirun: the CLI's job
    "profile": None,  # measures the devices under mpirun, as `run` does
    "profile validate": None,  # the profile command's report on the shipped profiles
}


def cli_commands(*parents):
    """The subcommands `cephalo [PARENTS] --help` lists (its "Subcommands:" section)."""
    help_text = cli(*parents, "--help")
    if "Subcommands:" not in help_text:
        return set()
    section = help_text.split("Subcommands:", 1)[1].split("\n\n", 1)[0]
    return set(re.findall(r"^\s{2}([a-z0-9][a-z0-9-]*)\s", section, re.M))


def test_every_cli_command_has_its_python_counterpart():
    leaves = set()
    for command in cli_commands():
        subcommands = cli_commands(command)
        leaves |= {f"{command} {sub}" for sub in subcommands}
        # A command that runs without a subcommand (`profile`; its usage says "[SUBCOMMAND]")
        # is a leaf of its own.
        if not subcommands or "[SUBCOMMAND]" in cli(command, "--help"):
            leaves.add(command)
    assert leaves == set(PYTHON_EQUIVALENTS), sorted(leaves)
    for command, function in PYTHON_EQUIVALENTS.items():
        if function is not None:
            assert callable(getattr(cephalo, function)), command


def without_wall_time(record):
    """A record with the planner's wall-clock time (planning_s) set to 0 wherever it is."""
    if isinstance(record, dict):
        return {k: 0 if k == "planning_s" else without_wall_time(v) for k, v in record.items()}
    if isinstance(record, list):
        return [without_wall_time(v) for v in record]
    return record


def test_every_cli_command_returns_the_python_record(tmp_path, default_plan):
    plan_file = tmp_path / "even.plan.json"
    plan_file.write_text(json.dumps(default_plan))
    split_file = tmp_path / "default.split.json"
    cli("plan", "--parallelism", "3d", "--scenario", DEFAULT, "-o", split_file)
    sim_file = tmp_path / "sim.json"
    sim_file.write_text(json.dumps(cephalo.simulate(DEFAULT, plan_file, ops=True)))
    run_file = tmp_path / "other.json"
    other = cephalo.simulate(DEFAULT, plan_file, ops=True, compute_model="roofline")
    other["source"] = "cpu"  # stands in for a measured RunResult (same schema)
    run_file.write_text(json.dumps(other))
    tokens = cephalo.simulate(DEFAULT, plan_file)["tokens_per_s"] / 1.25
    spec = ROOT / "notebooks/inputs/small-mixes.json"
    s, p = ["--scenario", DEFAULT], ["--plan", plan_file]
    cases = [
        ("describe", ["gpus"], lambda: cephalo.describe("gpus")),
        ("describe", ["models"], lambda: cephalo.describe("models")),
        ("describe", ["model", MODELS / "gpt2.json"],
         lambda: cephalo.describe("model", MODELS / "gpt2.json")),
        ("describe", [DEFAULT], lambda: cephalo.describe(DEFAULT)),
        ("plan", [*s, "--strategy", "even"], lambda: cephalo.plan(DEFAULT, strategy="even")),
        ("plan", [*s, "--parallelism", "3d", "--pipeline-stages", "4"],
         lambda: cephalo.plan(DEFAULT, parallelism="3d", pipeline_stages=4)),
        ("plan", [*s, "--parallelism", "auto", "--strategy", "even"],
         lambda: cephalo.plan(DEFAULT, parallelism="auto", strategy="even")),
        ("sweep", ["--spec", spec, "--quiet"], lambda: cephalo.sweep(spec)),
        ("predict layer", ["--gpu", "l4", "--model", "gpt-2.7b", "--seq", 512, "--micro-batch", 4],
         lambda: cephalo.predict_layer("l4", "gpt-2.7b", 512, 4)),
        ("predict memory", [*s, *p], lambda: cephalo.predict_memory(DEFAULT, plan_file)),
        ("predict collective", [*s, "--kind", "all-gather", "--bytes", "64MiB"],
         lambda: cephalo.predict_collective(DEFAULT, "all-gather", "64MiB")),
        ("predict 3d", [*s, "--split", split_file], lambda: cephalo.predict_3d(DEFAULT, split_file)),
        ("predict 3d", [*s, "--split", split_file, "--backward-at-forward-rate"],
         lambda: cephalo.predict_3d(DEFAULT, split_file, backward_at_forward_rate=True)),
        ("simulate", [*s, *p, "--ops"], lambda: cephalo.simulate(DEFAULT, plan_file, ops=True)),
        ("compare", [sim_file, run_file, *s, *p],
         lambda: cephalo.compare(sim_file, run_file, scenario=DEFAULT, plan=plan_file)),
        ("calibrate stack", [*s, *p, "--measured-tokens-per-s", tokens, "-o", tmp_path / "a.stack.json"],
         lambda: cephalo.calibrate_stack(DEFAULT, plan_file, measured_tokens_per_s=tokens,
                                         output=tmp_path / "b.stack.json")),
    ]
    for command, args, python in cases:
        expected = json.loads(cli(*command.split(), *args, "--json"))
        assert without_wall_time(python()) == without_wall_time(expected), (command, args)
    assert {c for c, _, _ in cases} | {"validate"} == {
        c for c, f in PYTHON_EQUIVALENTS.items() if f is not None}
    # `validate` prints a line per file, not a record: the same lines.
    files = [DEFAULT, plan_file, spec, MODELS / "gpt2.json", CPU2_PLAN, tmp_path / "missing.json"]
    done = subprocess.run([CLI, "validate", *map(str, files), "--scenario", str(DEFAULT)],
                          capture_output=True, text=True, check=False)
    checked = cephalo.validate_files(*files, scenario=DEFAULT)
    assert done.stdout.splitlines() == checked["lines"]
    assert done.returncode == 1 and (checked["invalid"], checked["unreadable"]) == (1, 1)


def test_calibrate_stack_fits_one_throughput_and_simulate_reads_it_back(tmp_path):
    # A stack 25 % slower than modelled: the fit recovers the compute factor, says comm and the
    # optimizer are not identified, and simulate(stack=) then predicts the measured throughput.
    p = cephalo.plan(DEFAULT, strategy="even")
    base = cephalo.simulate(DEFAULT, p)
    measured = base["tokens_per_s"] / 1.25
    out = tmp_path / "mine.stack.json"
    fit = cephalo.calibrate_stack(DEFAULT, p, measured_tokens_per_s=measured, output=out)
    factors = fit["stack"]["factors"]
    assert factors["compute"]["identified"] and not factors["comm"]["identified"]
    assert abs(fit["fitted_iteration_s"] - fit["measured_iteration_s"]) < 1e-3 * fit["measured_iteration_s"]
    assert cephalo.load_stack(out) == fit["stack"]
    again = cephalo.simulate(DEFAULT, p, stack=out)
    assert abs(again["tokens_per_s"] - measured) < 1e-3 * measured
    with pytest.raises(cephalo.InfeasibleError, match="roofline"):
        cephalo.calibrate_stack(DEFAULT, p, measured_tokens_per_s=base["tokens_per_s"] * 100)
    with pytest.raises(ValueError):
        cephalo.calibrate_stack(DEFAULT, p)
    with pytest.raises(cephalo.ValidationError, match="cephalo-stack"):
        cephalo.simulate(DEFAULT, p, stack=DEFAULT)


def test_calibrate_stack_reads_a_profiler_trace_as_the_cli_does(tmp_path):
    # One step of a PyTorch profiler trace (the legacy profiler's array; 20 ms steps, slower
    # than the roofline): calibrate_stack(trace=, step=) returns the record of
    # `cephalo calibrate stack --trace --step --json`; a GPU trace for a CPU rank is refused
    # naming the file.
    scenario, plan = SCENARIOS / "cpu-1rank.json", SCENARIOS / "plans" / "cpu-1rank-full.json"
    events = []
    for s in range(2):
        t = 2e4 * s
        events += [{"ph": "X", "name": f"ProfilerStep#{s}", "ts": t, "dur": 2e4, "pid": 1, "tid": 1},
                   {"ph": "X", "name": "## forward ##", "ts": t + 200, "dur": 6e3, "pid": 1, "tid": 1},
                   {"ph": "X", "name": "## backward ##", "ts": t + 6.4e3, "dur": 1.2e4, "pid": 1, "tid": 1},
                   {"ph": "X", "name": "## optimizer ##", "ts": t + 1.86e4, "dur": 1.2e3, "pid": 1, "tid": 1}]
    trace = tmp_path / "step.json"
    trace.write_text(json.dumps(events))
    fit = cephalo.calibrate_stack(scenario, plan, trace=trace, step=1)
    done = subprocess.run([CLI, "calibrate", "stack", "--scenario", str(scenario), "--plan", str(plan),
                           "--trace", str(trace), "--step", "1", "--json", "-o", str(tmp_path / "s.json")],
                          capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == fit
    assert fit["stack"]["fitted_on"]["measured"] == "trace"
    assert abs(fit["measured_iteration_s"] - 0.02) < 1e-9
    assert fit["stack"]["factors"]["compute"]["identified"]
    with pytest.raises(cephalo.ValidationError, match="v100-resnet-rank0.json.gz"):
        cephalo.calibrate_stack(scenario, plan, trace=ROOT / "tests/data/kineto/v100-resnet-rank0.json.gz")
    with pytest.raises(ValueError):
        cephalo.calibrate_stack(scenario, plan, step=1, measured_tokens_per_s=5)
    # compare(SIM, TRACE) is `cephalo compare SIM TRACE --json`.
    sim = tmp_path / "sim.json"
    sim.write_text(json.dumps(cephalo.simulate(scenario, plan, ops=True)))
    record = cephalo.compare(sim, trace, scenario=scenario, plan=plan, step=1)
    done = subprocess.run([CLI, "compare", str(sim), str(trace), "--scenario", str(scenario),
                           "--plan", str(plan), "--step", "1", "--json"],
                          capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == record
    assert {c["class"] for c in record["classes"]} == {"forward", "backward", "optimizer"}
    with pytest.raises(cephalo.ValidationError, match="step"):
        cephalo.compare(sim, sim, step=1)
