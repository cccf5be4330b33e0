"""Cephalo from Python: the libraries behind the `cephalo` CLI (pybind11 module `_cephalo`).

Inputs are files (str / os.PathLike) or Python dicts in the same JSON schema as the files.
Results are the libraries' own JSON records decoded into plain dicts and lists, with the same
field names the CLI prints; `simulate(..., text=True)` returns the record's exact text, the
bytes `cephalo simulate --json` prints. Errors raise the classes of `cephalo.errors`.

    import cephalo
    s = cephalo.load_scenario("scenarios/default.json")
    p = cephalo.plan(s, strategy="optimal")
    r = cephalo.simulate(s, p, ops=True)
    r.ranks_frame()          # pandas.DataFrame, one row per rank
"""

import json as _json
import os as _os

from . import _cephalo
from .errors import (CephaloError, InfeasibleError, IoError, NotFoundError, RuntimeFailure,
                     ValidationError)

__all__ = [
    "CephaloError", "ValidationError", "IoError", "NotFoundError", "InfeasibleError",
    "RuntimeFailure", "Scenario", "Plan", "Record", "load_scenario", "load_cluster", "load_job",
    "load_plan", "validate", "plan", "simulate", "sweep", "compare", "describe_model",
    "predict_layer", "predict_memory", "predict_collective", "strategies", "compute_sources",
    "hf_model_types",
]

Scenario = _cephalo.Scenario
Plan = _cephalo.Plan

_DICT_LABEL = "<dict>"


def _is_path(source):
    return isinstance(source, (str, bytes, _os.PathLike))


def _text(source):
    if not isinstance(source, dict):
        raise TypeError(f"expected a file path or a dict, got {type(source).__name__}")
    return _json.dumps(source)


class Record(dict):
    """A JSON record as a dict, with pandas views of its tables (pandas is optional)."""

    def _frame(self, key):
        import pandas  # optional dependency: only the DataFrame views need it
        return pandas.DataFrame(self.get(key, []))

    def ranks_frame(self):
        """One row per rank (the record's "ranks")."""
        return self._frame("ranks")

    def ops_frame(self):
        """One row per op (the record's "ops": id, start_s, end_s; simulate with ops=True)."""
        frame = self._frame("ops")
        if len(frame):
            frame["duration_s"] = frame["end_s"] - frame["start_s"]
        return frame

    def to_pandas(self, table="ranks"):
        """The DataFrame of `table` ("ranks" or "ops")."""
        if table not in ("ranks", "ops"):
            raise ValueError('table must be "ranks" or "ops"')
        return self.ranks_frame() if table == "ranks" else self.ops_frame()


def _record(text):
    return Record(_json.loads(text))


def load_scenario(source, base_dir=None):
    """A Scenario from a scenario file, or a dict (relative cluster/job files and hf_config
    paths resolve against base_dir, default the working directory)."""
    if isinstance(source, Scenario):
        return source
    if _is_path(source):
        return _cephalo.scenario_from_file(_os.fspath(source))
    base = _os.fspath(base_dir) if base_dir else "."
    # Named as if it were a file in base_dir, so that paths inside (cluster and job files,
    # a job's {"hf_config": ...}) resolve there, as they would beside a scenario file.
    return _cephalo.scenario_from_text(_text(source), _os.path.join(base, _DICT_LABEL), base)


def load_plan(source):
    """A Plan from a plan file, a dict, or the record `plan()` returned."""
    if isinstance(source, Plan):
        return source
    if _is_path(source):
        return _cephalo.plan_from_file(_os.fspath(source))
    return _cephalo.plan_from_text(_text(source), _DICT_LABEL)


def _plan_and_label(source):
    if _is_path(source):
        return load_plan(source), _os.fspath(source)
    return load_plan(source), _DICT_LABEL


def load_cluster(source):
    """The validated cluster as a dict (names resolved against the GPU catalog)."""
    if _is_path(source):
        return _json.loads(_cephalo.cluster_json("", _os.fspath(source), True))
    return _json.loads(_cephalo.cluster_json(_text(source), _DICT_LABEL, False))


def load_job(source, base_dir=None):
    """The validated job as a dict; "model_spec" is the architecture it resolved to (an
    {"hf_config": ...} path in a dict resolves against base_dir, default the working
    directory)."""
    if _is_path(source):
        return _json.loads(_cephalo.job_json("", _os.fspath(source), True))
    label = _os.path.join(_os.fspath(base_dir), _DICT_LABEL) if base_dir else _DICT_LABEL
    return _json.loads(_cephalo.job_json(_text(source), label, False))


def validate(scenario, plan=None):
    """Runs the checks `cephalo validate` runs: the scenario with its cost models (calibration
    files included) and, when given, the plan against it. Raises on the first problem."""
    s = load_scenario(scenario)
    _cephalo.validate_scenario(s)
    if plan is not None:
        p, label = _plan_and_label(plan)
        _cephalo.validate_plan(p, s, label)


def strategies():
    """The planner strategies, in the order `cephalo plan --help` lists them."""
    return list(_cephalo.strategy_names())


def compute_sources():
    """The compute-model sources (auto, profile, calibrated, roofline)."""
    return list(_cephalo.compute_sources())


def hf_model_types():
    """The Hugging Face model_types a {"hf_config": ...} model may have."""
    return list(_cephalo.supported_hf_model_types())


def plan(scenario, strategy="optimal", compute_model="auto", offload="auto", max_micro_batch=512,
         verify_with_simulator=True, search_neighbours=24, micro_batch=None, accumulation=None,
         activation_checkpointing=None, sharding=None, group_size=None, text=False):
    """Plans the scenario with a strategy; the Plan record `cephalo plan --json` prints (with
    its "predicted" block). Pass it to simulate() as it is.

    The schedule arguments are the CLI's flags (`--micro-batch`, `--accumulation`,
    `--activation-checkpointing`, `--sharding`, `--group-size`, `--offload`), checked the same
    way: None leaves that choice open (optimal searches it; planner/README.md), a value fixes it
    (accumulation "layered" | "standard" | "no_sync"; activation_checkpointing "full" | "none" |
    "every:K" | "auto"; sharding "full" | "hybrid" | "auto"). text=True returns the record's
    JSON text, the bytes `cephalo plan --json` prints with the same flags."""
    s = load_scenario(scenario)
    out = _cephalo.plan_json(s, strategy, compute_model, offload, max_micro_batch,
                                      verify_with_simulator, search_neighbours, micro_batch,
                                      accumulation or "", activation_checkpointing or "",
                             sharding or "", group_size)
    return out if text else _record(out)


def simulate(scenario, plan, ops=False, compute_model="auto", link_sharing=True,
             queue="binary-heap", text=False):
    """Replays one iteration of `plan` on the scenario's modelled cluster: the SimResult record
    (per-op start/end times with ops=True). text=True returns the record's JSON text, the same
    bytes as `cephalo simulate --json [--ops]`."""
    s = load_scenario(scenario)
    p, label = _plan_and_label(plan)
    out = _cephalo.simulate_json(s, p, label, ops, compute_model, link_sharing, queue)
    return out if text else _record(out)


def _result_source(source):
    if _is_path(source):
        return "", _os.fspath(source), True
    return _text(source), _DICT_LABEL, False


def compare(simulated, measured, scenario=None, plan=None):
    """Simulated vs measured (SimResult and RunResult records or files): the record of
    `cephalo compare --json`. With scenario and plan, also per op class and op by op."""
    if (scenario is None) != (plan is None):
        raise ValueError("give both scenario and plan (the graph the op ids key), or neither")
    s = load_scenario(scenario) if scenario is not None else None
    p, label = _plan_and_label(plan) if plan is not None else (None, "")
    return _record(_cephalo.compare_json(*_result_source(simulated), *_result_source(measured),
                                         s, p, label))


def sweep(spec, progress=None, max_mixes=5000):
    """A what-if sweep (`cephalo sweep --spec FILE --json`): every mix planned and simulated,
    Pareto frontier marked. progress(done, total, mix) is called after each mix."""
    return _record(_cephalo.sweep_json(_os.fspath(spec), max_mixes, progress))


def describe_model(model):
    """A catalog model (by name) or a Hugging Face config.json: architecture and parameter
    counts, the record of `cephalo describe model NAME --json`."""
    return _json.loads(_cephalo.model_json(_os.fspath(model)))


def predict_layer(gpu, model, seq, micro_batch, dtype=None, source="auto", attention="flash",
                  fused_elementwise=True, compiled=False, framework="fsdp2"):
    """Per-layer forward / backward / recompute time of a model (catalog name, or the path of a
    Hugging Face config.json) on a catalog GPU (`cephalo predict layer --json`), for the stack
    named by attention ("flash" | "eager"), fused_elementwise, compiled and framework ("fsdp2" |
    "fsdp1" | "deepspeed_zero3" | "ddp"); the record's "implementation" says what was priced.
    dtype None: a config's torch_dtype, else fp16. "warnings" lists a dtype the GPU runs on a
    slower pipeline than asked (V100 bf16).
    Bad values raise ValidationError naming the keyword and the allowed values."""
    if not isinstance(fused_elementwise, bool) or not isinstance(compiled, bool):
        bad = "fused_elementwise" if not isinstance(fused_elementwise, bool) else "compiled"
        value = fused_elementwise if bad == "fused_elementwise" else compiled
        raise ValidationError(
            f"arguments: {bad}: got {value!r}; expected True or False", file="arguments",
            json_path=bad, value=repr(value), expected="True or False")
    return _record(_cephalo.layer_json(gpu, _os.fspath(model), seq, dtype or "", micro_batch,
                                       source,
                                       attention, fused_elementwise, compiled, framework))


def predict_memory(scenario, plan):
    """The memory model's per-rank terms for a plan (`cephalo predict memory --json`)."""
    s = load_scenario(scenario)
    p, label = _plan_and_label(plan)
    return _record(_cephalo.memory_json(s, p, label))


def predict_collective(scenario, kind, bytes, ranks=None, shares=None, uneven="auto",
                       sweep=None):
    """Time and bandwidth of one collective on the scenario's cluster (`cephalo predict
    collective --json`): bytes is a number or a string with a unit ("64MiB"); ranks the
    participants (default all), shares their slices summing to 1 (default even), uneven the
    variant for uneven shares ("auto": the cheaper of "grouped" and "padded"), sweep a
    measured collective sweep to calibrate the links with."""
    s = load_scenario(scenario)
    size = bytes if isinstance(bytes, str) else repr(bytes)
    return _record(_cephalo.collective_json(
        s, kind, size, None if ranks is None else list(ranks),
        None if shares is None else list(shares), uneven,
        "" if sweep is None else _os.fspath(sweep)))
