"""pytest suite of the cephalo Python module, part three (ctest label `python`): every keyword
of every function is checked as the CLI checks its flag (hostile input, round eight,
tests/README.md): a wrong type names the keyword instead of pybind11's list of signatures,
numpy scalars are the numbers and booleans they hold, and a value the data cannot satisfy (a
trace's step) is blamed on the keyword, as the CLI blames the flag."""

import json

import numpy
import pytest

import cephalo

from support import CLI, CPU2, ROOT, SCENARIOS  # noqa: F401

MIX = SCENARIOS / "modern-mix-gpt2.7b.json"
MIX_SPLIT = SCENARIOS / "plans/modern-mix-gpt2.7b-3d.json"
CPU1, CPU1_PLAN = SCENARIOS / "cpu-1rank.json", SCENARIOS / "plans/cpu-1rank-full.json"
CPU2_EVEN = SCENARIOS / "plans/cpu-2rank-even.json"
TRACE = ROOT / "tests/data/kineto/a100-80gb-adam-rank0.json.gz"


@pytest.mark.parametrize("call, keyword", [
    (lambda: cephalo.predict_layer("H100", "gpt-2.7b", 2048.5, 1), "seq"),
    (lambda: cephalo.predict_layer("H100", "gpt-2.7b", "2048", 1), "seq"),
    (lambda: cephalo.predict_layer("H100", "gpt-2.7b", 2**70, 1), "seq"),
    (lambda: cephalo.predict_layer("H100", "gpt-2.7b", 2048, True), "micro_batch"),
    (lambda: cephalo.predict_layer(None, "gpt-2.7b", 2048, 1), "gpu"),
    (lambda: cephalo.predict_layer("H100", None, 2048, 1), "model"),
    (lambda: cephalo.predict_layer("H100", "gpt-2.7b", 2048, 1, dtype=16), "dtype"),
    (lambda: cephalo.predict_layer("H100", "gpt-2.7b", 2048, 1, framework=None), "framework"),
    (lambda: cephalo.predict_3d(MIX, MIX_SPLIT, activation_checkpointing=5),
     "activation_checkpointing"),
    (lambda: cephalo.predict_3d(MIX, MIX_SPLIT, scatter_gather="no"), "scatter_gather"),
    (lambda: cephalo.predict_3d(MIX, MIX_SPLIT, dp_overlap=None), "dp_overlap"),
    (lambda: cephalo.predict_3d(MIX, MIX_SPLIT, backward_at_forward_rate=1),
     "backward_at_forward_rate"),
    (lambda: cephalo.predict_collective(CPU2, None, 1e6), "kind"),
    (lambda: cephalo.predict_collective(CPU2, "all-gather", 1e6, ranks="0,1"), "ranks"),
    (lambda: cephalo.predict_collective(CPU2, "all-gather", 1e6, shares=0.5), "shares"),
    (lambda: cephalo.calibrate_stack(CPU2, CPU2_EVEN, measured_tokens_per_s="10"),
     "measured_tokens_per_s"),
    (lambda: cephalo.calibrate_stack(CPU2, CPU2_EVEN, measured_tokens_per_s=float("inf")),
     "measured_tokens_per_s"),
    (lambda: cephalo.calibrate_stack(CPU2, CPU2_EVEN, measured_tokens_per_s=True),
     "measured_tokens_per_s"),
    (lambda: cephalo.describe(None), "what"),
    (lambda: cephalo.describe("model", 5), "model"),
])
def test_a_keyword_of_the_wrong_type_is_refused_naming_it(call, keyword):
    # Before: pybind11's TypeError listing the binding's whole signature (predict_layer,
    # predict_3d, predict_collective, calibrate_stack), or os.fspath's naming no keyword.
    with pytest.raises(cephalo.ValidationError) as info:
        call()
    assert info.value.json_path == keyword and info.value.file == "arguments"


@pytest.mark.parametrize("call, check", [
    # numpy's integer and bool scalars were refused as "got 1; expected an integer (or None)" /
    # "got True; expected True or False".
    (lambda: cephalo.plan(CPU2, strategy="even", micro_batch=numpy.int64(1)),
     lambda r: r["strategy"] == "even"),
    (lambda: cephalo.simulate(CPU2, CPU2_EVEN, ops=numpy.True_), lambda r: len(r["ops"]) > 0),
    (lambda: cephalo.predict_layer("H100", "gpt-2.7b", numpy.int32(2048), numpy.int64(1),
                                   fused_elementwise=numpy.True_),
     lambda r: r["forward_ms"] > 0),
    (lambda: cephalo.predict_3d(MIX, MIX_SPLIT, scatter_gather=numpy.False_),
     lambda r: r["iteration_s"] > 0),
    (lambda: cephalo.predict_collective(CPU2, "all-gather", numpy.float64(1e6),
                                        ranks=numpy.array([0, 1])),
     lambda r: r["bytes"] == 1e6),
])
def test_numpy_scalars_are_the_numbers_they_hold(call, check):
    assert check(call())


def test_a_step_the_trace_lacks_is_blamed_on_the_keyword(tmp_path):
    # Before: the trace's $.traceEvents was blamed, as if the trace were bad; the CLI now exits
    # 2 at --step with the same words.
    sim = tmp_path / "sim.json"
    sim.write_text(json.dumps(cephalo.simulate(CPU1, CPU1_PLAN, ops=True)))
    for call in (lambda: cephalo.compare(sim, TRACE, step=99),
                 lambda: cephalo.compare(sim, TRACE, step="ProfilerStep#9"),
                 lambda: cephalo.calibrate_stack(CPU1, CPU1_PLAN, trace=TRACE, step=99)):
        with pytest.raises(cephalo.ValidationError) as info:
            call()
        assert info.value.file == "arguments" and info.value.json_path == "step"
        assert "ProfilerStep#550, ProfilerStep#551" in str(info.value)
    # A numpy integer names a step as an int does.
    assert cephalo.compare(sim, TRACE, step=numpy.int64(552))["step"] == "ProfilerStep#552"


@pytest.mark.parametrize("split, path", [
    ({"micro_batches": 5}, "micro_batches"),
    ({"model_split": {"micro_batches": 5}}, "model_split.micro_batches"),
    ({"tensor_parallel": 2}, "tensor_parallel"),
    ({"model_split": {}}, "model_split"),
])
def test_a_bare_splits_refusal_names_a_key_its_file_has(tmp_path, split, path):
    # Before: blamed at model_split.stages[0], which none of these files has.
    file = tmp_path / "split.json"
    file.write_text(json.dumps(split))
    with pytest.raises(cephalo.ValidationError) as info:
        cephalo.predict_3d(MIX, file)
    assert info.value.file == str(file) and info.value.json_path == path


def test_describe_reads_every_argument_or_refuses_it():
    for what, model, keyword in (("gpus", "H100", "model"), ("models", "x", "model"),
                                 ("gpu", None, "what")):
        with pytest.raises(cephalo.ValidationError) as info:
            cephalo.describe(what, model)
        assert info.value.file == "arguments" and info.value.json_path == keyword


# Hostile input, round nine (tests/README.md).

@pytest.mark.parametrize("call, keyword", [
    # Before: os.fspath's TypeError naming no keyword; max_mixes 0 or True passed through to
    # the sweep (the CLI's --max-mixes refuses both); a progress that is not a function failed
    # only after the first mix had been planned.
    (lambda: cephalo.sweep(None), "spec"),
    (lambda: cephalo.sweep(SCENARIOS / "sweeps/gpt2.7b-mixes.json", max_mixes=0), "max_mixes"),
    (lambda: cephalo.sweep(SCENARIOS / "sweeps/gpt2.7b-mixes.json", max_mixes=True),
     "max_mixes"),
    (lambda: cephalo.sweep(SCENARIOS / "sweeps/gpt2.7b-mixes.json", max_mixes="5"), "max_mixes"),
    (lambda: cephalo.sweep(SCENARIOS / "sweeps/gpt2.7b-mixes.json", progress=5), "progress"),
])
def test_a_sweep_keyword_of_the_wrong_type_is_refused_naming_it(call, keyword):
    with pytest.raises(cephalo.ValidationError) as info:
        call()
    assert info.value.json_path == keyword and info.value.file == "arguments"


@pytest.mark.parametrize("key, value, dtype", [
    ("torch_dtype", "torch.bfloat16", "bf16"),
    ("torch_dtype", "torch.half", "fp16"),
    ("torch_dtype", "torch.float32", "fp32"),
    ("dtype", "bfloat16", "bf16"),  # transformers >= 4.56 writes "dtype"
])
def test_every_spelling_of_a_checkpoint_dtype_is_the_dtype_it_names(tmp_path, key, value, dtype):
    # Before: "torch.bfloat16" was "no compute dtype: not used" and "dtype" an ignored key,
    # both priced in fp16.
    config = json.loads((SCENARIOS / "models/qwen2-0.5b.json").read_text())
    config.pop("torch_dtype", None)
    config[key] = value
    file = tmp_path / "config.json"
    file.write_text(json.dumps(config))
    assert cephalo.predict_layer("H100", file, 1024, 1)["dtype"] == dtype
    # The same spellings as the dtype keyword.
    assert cephalo.predict_layer("H100", "gpt-2.7b", 1024, 1, dtype=value)["dtype"] == dtype


@pytest.mark.parametrize("value", ["bfloat61", "torch.bf16", "", "tf32"])
def test_a_dtype_typo_is_refused_with_the_accepted_spellings(tmp_path, value):
    config = json.loads((SCENARIOS / "models/qwen2-0.5b.json").read_text())
    config["torch_dtype"] = value
    file = tmp_path / "config.json"
    file.write_text(json.dumps(config))
    with pytest.raises(cephalo.ValidationError) as info:
        cephalo.predict_layer("H100", file, 1024, 1)
    assert info.value.file == str(file) and info.value.json_path == "torch_dtype"
    assert "torch.bfloat16" in str(info.value)
    with pytest.raises(cephalo.ValidationError) as info:
        cephalo.predict_layer("H100", "gpt-2.7b", 1024, 1, dtype=value or "x")
    assert info.value.json_path == "dtype" and "torch.bfloat16" in str(info.value)


def test_two_nodes_of_one_name_are_refused(tmp_path):
    # Before: accepted, and every report row of either node read alike.
    cluster = json.loads((SCENARIOS / "clusters/a100-l4-mixed-10g.json").read_text())
    cluster["nodes"][1]["name"] = cluster["nodes"][0]["name"]
    for source in (cluster, tmp_path / "cluster.json"):
        if not isinstance(source, dict):
            source.write_text(json.dumps(cluster))
        with pytest.raises(cephalo.ValidationError) as info:
            cephalo.load_cluster(source)
        assert info.value.json_path == "nodes[1].name"
        assert "no other node has" in str(info.value)


def test_a_plan_without_rows_names_both_forms():
    # Before: "at ranks: ... required field "ranks"", silent on the compact form.
    plan = json.loads(CPU2_EVEN.read_text())
    del plan["ranks"]
    with pytest.raises(cephalo.ValidationError) as info:
        cephalo.load_plan(plan, CPU2)
    assert info.value.json_path == "ranks" and "rank_classes" in str(info.value)


def test_ops_frame_of_a_record_without_ops_says_so():
    # Before: KeyError: 'name' (the graph's columns looked up for timings the record lacks).
    record = cephalo.simulate(CPU2, CPU2_EVEN)
    with pytest.raises(ValueError, match="ops=True"):
        record.ops_frame()
    assert len(cephalo.simulate(CPU2, CPU2_EVEN, ops=True).ops_frame()) > 0


@pytest.mark.parametrize("files", [(None,), (CPU2, 5)])
def test_validate_files_names_a_file_that_is_no_path(files):
    # Before: os.fspath's TypeError naming no keyword.
    with pytest.raises(cephalo.ValidationError) as info:
        cephalo.validate_files(*files)
    assert info.value.json_path == "files" and info.value.file == "arguments"
