"""Cephalo from Python: the libraries behind the `cephalo` CLI (pybind11 module `_cephalo`).

Inputs are files (str / os.PathLike) or Python dicts in the same JSON schema as the files.
Results are the libraries' own JSON records decoded into plain dicts and lists, with the same
field names the CLI prints; `simulate(..., text=True)` returns the record's exact text, the
bytes `cephalo simulate --json` prints. Errors raise the classes of `cephalo.errors`.

    import cephalo
    s = cephalo.load_scenario("scenarios/default.json")
    p = cephalo.plan(s, strategy="optimal")
    r = cephalo.simulate(s, p, ops=True, trace="trace.json")   # trace: opens in Perfetto
    r.ranks_frame()          # pandas.DataFrame, one row per rank
    r.ops_frame()            # one row per op: name, kind, rank, unit, micro-batch, times

Units are in the field names and in each docstring: times in seconds (`_s`), sizes in bytes
(`_bytes`), throughput in samples/s or tokens/s, prices in dollars per hour.

What the CLI prints on stderr beside its answer ("note: ..." / "warning: ...") is raised as a
cephalo.CephaloWarning with the same text (warnings.catch_warnings or -W to see or silence it);
what it prints in its record stays in the returned record ("warnings", "notes", "fits").
"""

import functools as _functools
import json as _json
import math as _math
import operator as _operator
import os as _os
import warnings as _warnings

from . import _cephalo
from .errors import (CephaloError, CephaloWarning, InfeasibleError, IoError, NotFoundError,
                     RuntimeFailure, ValidationError)

__all__ = [
    "__version__", "CephaloError", "ValidationError", "IoError", "NotFoundError", "InfeasibleError",
    "RuntimeFailure", "CephaloWarning", "Scenario", "Plan", "Record", "load_scenario", "load_cluster", "load_job",
    "load_plan", "validate", "validate_files", "plan", "simulate", "sweep", "compare",
    "describe", "describe_model", "predict_layer", "predict_memory", "predict_collective",
    "predict_3d", "strategies", "compute_sources",
    "hf_model_types", "calibrate_stack", "load_stack",
]

# The CMake project version (the one `cephalo --version` prints), compiled into the module.
__version__ = _cephalo.__version__

Scenario = _cephalo.Scenario
Plan = _cephalo.Plan

_DICT_LABEL = "<dict>"


def _is_path(source):
    return isinstance(source, (str, bytes, _os.PathLike))


def _text(source):
    if not isinstance(source, dict):
        raise TypeError(f"expected a file path or a dict, got {type(source).__name__}")
    return _json.dumps(source)


def _flat(rows):
    """Rows with each dict-valued field spread into columns of their own, so that a frame has
    one value per cell: {"terms_bytes": {"activations": 3}} gives "activations_bytes" (the
    unit suffix of the field moves to each key), any other {"a": {"b": 1}} gives "a_b"."""
    out = []
    for row in rows:
        flat = {}
        for key, value in row.items():
            if not isinstance(value, dict):
                flat[key] = value
                continue
            _, sep, unit = key.rpartition("_")
            for sub, v in value.items():
                name = f"{sub}_{unit}" if sep and unit in ("bytes", "s") else f"{key}_{sub}"
                if name in row or name in flat:
                    name = f"{key}.{sub}"  # never overwrite a field the row has itself
                flat[name] = v
        out.append(flat)
    return out


# Per-op columns, in frame order (the graph's fields between the id and the times).
_OP_COLUMNS = ("name", "kind", "rank", "stream", "unit", "micro_batch", "micro_batch_samples")
_OP_AMOUNTS = ("flops", "bytes")
# Sweep fields with no value for an infeasible mix (the record writes 0): NaN in mixes_frame.
_SWEEP_THROUGHPUT = ("samples_per_s", "tokens_per_s", "samples_per_dollar", "tokens_per_dollar")


class Record(dict):
    """A JSON record as a dict (equal to the CLI's --json record), with pandas views of its
    tables (pandas is optional, imported by the views)."""

    def _frame(self, key):
        import pandas  # optional dependency: only the DataFrame views need it
        return pandas.DataFrame(_flat(self.get(key, [])))

    def ranks_frame(self):
        """One row per rank (the record's "ranks"), one value per cell: a SimResult's times in
        seconds (compute_s, comm_s, idle_s, ...) and memory in bytes (peak_memory_bytes,
        capacity_bytes); predict_memory's terms as columns of their own, in bytes
        (training_state_bytes, activations_bytes, ... beside total_bytes)."""
        return self._frame("ranks")

    def ops_frame(self, scenario=None, plan=None):
        """One row per op of the record's "ops" (simulate with ops=True, or a RunResult
        recorded with per-op times): id; what the op is, from the plan's training graph:
        name ("F u3 mb1 r0"), kind ("forward", "all_gather", ...), rank, stream ("compute",
        "comm", "d2h", "h2d"), unit (0 embedding, 1..L layers, L+1 head, -1 the optimizer),
        micro_batch (index in the rank's micro-batches, -1 none), micro_batch_samples
        (samples, 0 none); then start_s, end_s, duration_s (seconds from the iteration start),
        flops (model FLOPs of a compute op) and bytes (a collective's full buffer, a copy's
        bytes). A record from simulate() knows its graph; any other needs the scenario and
        plan it ran (else only id and the times)."""
        import pandas
        if "ops" not in self:
            # A frame of no rows would read as an iteration without ops; the graph's columns
            # of a record without timings were a KeyError on "name".
            raise ValueError("this record has no per-op timings (\"ops\"): simulate(..., "
                             "ops=True), or a RunResult recorded with per-op times")
        timings = self["ops"]
        columns = getattr(self, "_op_columns", None)
        if columns is None and (scenario is not None or plan is not None):
            if scenario is None or plan is None:
                raise ValueError("give both scenario and plan (the graph the op ids key)")
            s = load_scenario(scenario)
            p, label = _plan_and_label(plan, s)
            columns = _cephalo.op_table(s, p, label, _json.dumps(self))
        data = {"id": [o["id"] for o in timings]}
        if columns is not None:
            data.update((c, columns[c]) for c in _OP_COLUMNS)
        data["start_s"] = [o["start_s"] for o in timings]
        data["end_s"] = [o["end_s"] for o in timings]
        frame = pandas.DataFrame(data)
        frame["duration_s"] = frame["end_s"] - frame["start_s"]
        if columns is not None:
            for c in _OP_AMOUNTS:
                frame[c] = columns[c]
        return frame

    def mixes_frame(self):
        """One row per mix and network option of a sweep record: mix ("2x A100-80GB + 4x
        L4"), network (its index) and network_name, gpus, nodes, cost_per_hour (dollars per
        hour, the GPUs' and the network's), family (the plan family the row chose: "fsdp" or
        "3d"), plan (the chosen plan in words), feasible, meets_constraints, samples_per_s and
        tokens_per_s (simulated), predicted_samples_per_s (the planner's), samples_per_dollar
        and tokens_per_dollar, pareto, planning_s (seconds), error (why infeasible), counts
        (per pool entry). Throughput a mix does not have is NaN, not the record's 0:
        samples_per_s, tokens_per_s and the per-dollar columns of every infeasible mix, and
        predicted_samples_per_s of a mix that could not be planned."""
        frame = self._frame("mixes")
        if len(frame):
            infeasible = ~frame["feasible"].astype(bool)
            for c in _SWEEP_THROUGHPUT:
                frame[c] = frame[c].astype(float).mask(infeasible)
            unplanned = infeasible & (frame["predicted_samples_per_s"] == 0)
            frame["predicted_samples_per_s"] = (
                frame["predicted_samples_per_s"].astype(float).mask(unplanned))
        return frame

    def op_classes_frame(self):
        """One row per op class of predict_layer(..., ops=True) (the record's "op_classes"):
        name, ops (the op names in it), forward_ms and backward_ms (priced), roofline_forward_ms
        and roofline_backward_ms (the datasheet roofline), forward_ratio / backward_ratio
        (priced / roofline) and forward_share / backward_share (of the layer's time)."""
        return self._frame("op_classes")

    def to_pandas(self, table="ranks"):
        """The DataFrame of `table`: "ranks" (ranks_frame), "ops" (ops_frame) or "mixes"
        (mixes_frame, a sweep)."""
        views = {"ranks": self.ranks_frame, "ops": self.ops_frame, "mixes": self.mixes_frame}
        if table not in views:
            raise ValueError('table must be "ranks", "ops" or "mixes"')
        return views[table]()


def _refuse(keyword, value, expected):
    raise ValidationError("%s: got %r; expected %s" % (keyword, value, expected),
                          file="arguments", json_path=keyword, value=repr(value),
                          expected=expected)


def _is_bool(value):
    """True and False, and numpy's bool scalars (numpy.bool_), which are no Python bool."""
    return isinstance(value, bool) or (type(value).__module__ == "numpy"
                                       and type(value).__name__ in ("bool_", "bool"))


def _count(keyword, value, none_ok=True):
    """A count keyword is an integer (an int or an integer scalar such as numpy.int64: anything
    with __index__) or None: bool is an int to Python, but True is no count; one past the C++
    int would otherwise fail as pybind11's list of signatures. Returns it as an int."""
    if value is None and none_ok:
        return None
    if _is_bool(value) or not hasattr(type(value), "__index__"):
        _refuse(keyword, value, "an integer" + (" (or None)" if none_ok else ""))
    value = _operator.index(value)
    if not -2**31 <= value < 2**31:
        _refuse(keyword, value, "an integer" + (" (or None)" if none_ok else "") + " below 2^31")
    return value


def _number(keyword, value):
    """A measured quantity is a finite real number (int, float or a numpy scalar), not a bool
    nor a string, named in the error rather than left to pybind11's list of signatures."""
    if value is None:
        return None
    if _is_bool(value) or isinstance(value, (str, bytes)) or not hasattr(type(value),
                                                                           "__float__"):
        _refuse(keyword, value, "a number")
    value = float(value)
    if not _math.isfinite(value):
        _refuse(keyword, value, "a finite number")
    return value


def _switch(keyword, value, none_ok=False):
    """A yes/no keyword is True or False (numpy's bool scalars too), or None where None means
    the default: any other object would be read by its truth, so "no" or "false" would switch
    it on. Returns it as a bool (or None)."""
    if value is None and none_ok:
        return None
    if not _is_bool(value):
        _refuse(keyword, value, "True or False" + (" (or None)" if none_ok else ""))
    return bool(value)


def _word(keyword, value, none_ok=False):
    """A keyword that takes a word ("even", "auto") is a str (or None where None means the
    default), named in the error rather than left to pybind11's list of signatures."""
    if not isinstance(value, str) and not (none_ok and value is None):
        _refuse(keyword, value, "a string" + (" (or None)" if none_ok else ""))
    return value


def _path(keyword, value):
    """A path keyword: None is "not asked for"; "" is refused rather than read as None."""
    if value is None:
        return ""
    path = _os.fspath(value)
    if path == "":
        raise ValidationError("%s: got \"\" (empty); expected a path, or None for none" % keyword,
                              file="arguments", json_path=keyword, value="\"\"",
                              expected="a path, or None for none")
    return path


def _record(text):
    return Record(_json.loads(text))


def _say(lines):
    """Each line the CLI prints on stderr for the same call, as a CephaloWarning (blamed on
    the caller of the public function, past its _noting_the_cache wrapper)."""
    for line in lines:
        _warnings.warn(line, CephaloWarning, stacklevel=4)


_cache_note_said = False


def _noting_the_cache(function):
    """Says the start-up cache's note once per process, after the first public call that finds
    an entry it ignored (a planted link, a corrupt file: the CLI prints it as the command
    ends), whether that call returns or raises."""
    @_functools.wraps(function)
    def call(*args, **kwargs):
        global _cache_note_said
        try:
            return function(*args, **kwargs)
        finally:
            if not _cache_note_said:
                note = _cephalo.start_up_cache_note()
                if note:
                    _cache_note_said = True
                    _warnings.warn("note: " + note, CephaloWarning, stacklevel=2)
    return call


def load_scenario(source, base_dir=None):
    """A Scenario from a scenario file, or a dict (relative cluster/job files and hf_config
    paths resolve against base_dir, default the working directory). A dict may be a
    Scenario's own to_json(), which reads back to an equal Scenario."""
    if isinstance(source, Scenario):
        return source
    if _is_path(source):
        return _cephalo.scenario_from_file(_os.fspath(source))
    base = _os.fspath(base_dir) if base_dir else "."
    # Named as if it were a file in base_dir, so that paths inside (cluster and job files,
    # a job's {"hf_config": ...}) resolve there, as they would beside a scenario file.
    return _cephalo.scenario_from_text(_text(source), _os.path.join(base, _DICT_LABEL), base)


def load_plan(source, scenario=None):
    """A Plan from a plan file, a dict, or the record `plan()` returned. With the scenario it
    is for, its rows are counted against the cluster first (a class running past it is named
    as such, not blamed on the state shares it throws off)."""
    if isinstance(source, Plan):
        return source
    s = load_scenario(scenario) if scenario is not None else None
    if _is_path(source):
        return _cephalo.plan_from_file(_os.fspath(source), s)
    return _cephalo.plan_from_text(_text(source), _DICT_LABEL, s)


def _plan_and_label(source, scenario=None):
    if _is_path(source):
        return load_plan(source, scenario), _os.fspath(source)
    return load_plan(source, scenario), _DICT_LABEL


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
        p, label = _plan_and_label(plan, s)
        _cephalo.validate_plan(p, s, label)


def validate_files(*files, scenario=None):
    """`cephalo validate FILE... [--scenario S]`: recognises each file (scenario, cluster, job,
    plan, catalog, sweep spec, Hugging Face config) and checks it as the command reading it
    does, plans against `scenario` when given. Returns {"lines": the lines the CLI prints, one
    per file ("F: ok (what)" or the error), "invalid": count, "unreadable": count}; raises
    nothing for a bad file (its line says why)."""
    for f in files:
        if not _is_path(f):
            _refuse("files", f, "paths of files to check")
    s = load_scenario(scenario) if scenario is not None else None
    lines, invalid, unreadable = _cephalo.check_files([_os.fspath(f) for f in files], s)
    return {"lines": list(lines), "invalid": invalid, "unreadable": unreadable}


def strategies():
    """The planner strategies, in the order `cephalo plan --help` lists them."""
    return list(_cephalo.strategy_names())


def compute_sources():
    """The compute-model sources (auto, profile, calibrated, roofline)."""
    return list(_cephalo.compute_sources())


def hf_model_types():
    """The Hugging Face model_types a {"hf_config": ...} model may have."""
    return list(_cephalo.supported_hf_model_types())


def plan(scenario, strategy=None, compute_model="auto", offload=None, max_micro_batch=None,
         verify_with_simulator=None, search_neighbours=None, micro_batch=None, accumulation=None,
         activation_checkpointing=None, sharding=None, group_size=None,
         cephalo_shares=None, cephalo_corrected_share_memory=None, stack=None,
         text=False, parallelism=None, tensor_parallel=None, pipeline_stages=None,
         micro_batches=None, pipeline_schedule=None, sequence_parallel=None, use_all=False):
    """Plans the scenario with a strategy; the Plan record `cephalo plan --json` prints: per
    rank batch and micro_batch (samples), micro_batches and state_share (a fraction), and the
    "predicted" block (predicted_iteration_s, model_iteration_s, planning_s in seconds,
    predicted_samples_per_s in samples/s; per rank compute_s in seconds, memory_bytes and
    usable_bytes in bytes). Pass it to simulate() as it is. max_micro_batch is in samples,
    search_neighbours the most neighbour plans `search` simulates.

    The schedule arguments are the CLI's flags (`--micro-batch`, `--accumulation`,
    `--activation-checkpointing`, `--sharding`, `--group-size`, `--offload`), checked the same
    way: None leaves that choice open (optimal searches it; planner/README.md), a value fixes it
    (accumulation "layered" | "standard" | "no_sync"; activation_checkpointing "full" | "none" |
    "selective" | "every:K" | "auto"; sharding "full" | "hybrid" | "auto"). For strategy "cephalo",
    cephalo_shares ("min_params" | "min_util") and cephalo_corrected_share_memory are
    `--cephalo-shares` and `--cephalo-corrected-share-memory`. text=True returns the record's
    JSON text, the bytes `cephalo plan --json --per-rank` prints with the same flags (the
    record is per rank at any size, where the CLI writes rank classes above 256 ranks:
    ranks_frame() reads "ranks"). stack=path is
    `--stack`: a calibrate_stack() file whose factors multiply the modelled times.

    parallelism="3d" is `--parallelism 3d`: the search over tensor x pipeline x data parallel
    splits, whose record (the split, its estimate in seconds and bytes per stage) `plan
    --parallelism 3d --json` prints; tensor_parallel, pipeline_stages, micro_batches (counts),
    pipeline_schedule ("gpipe" | "1f1b" | "interleaved:V") and sequence_parallel fix one
    dimension each (None or False: searched), sharding may also be "optimizer" or "none".
    parallelism="auto" plans both and returns the faster one's record, as the CLI does;
    parallelism="fsdp" only FSDP plans. None (the default) is the CLI's default: the family the
    arguments given fix (strategy, micro_batch, ...: FSDP; tensor_parallel, ...: 3d), else auto.

    None leaves an argument at its default (strategy "optimal", offload "auto",
    max_micro_batch 512, verify_with_simulator True, search_neighbours 24, cephalo_shares
    "min_params"); an argument given that the chosen parallelism does not read (strategy with
    parallelism="3d", tensor_parallel without it) raises ValidationError naming it, as the CLI
    refuses the flag. Counts are ints: True is refused, not taken as 1.

    use_all=True is `--use-all`: plan every GPU and weigh no subset. Otherwise (strategy
    optimal or search, or parallelism "3d") the cluster without its slowest GPU types is planned
    too, and when that is at least 1 % faster it is the plan returned: its "nodes" list the
    nodes it runs on (the others idle; every reader, simulate() included, runs it on those), and
    predicted["faster_without"] names the idle nodes and ranks and both times."""
    keywords = dict(strategy=strategy, offload=offload, max_micro_batch=max_micro_batch,
                    verify_with_simulator=verify_with_simulator,
                    search_neighbours=search_neighbours, micro_batch=micro_batch,
                    accumulation=accumulation, activation_checkpointing=activation_checkpointing,
                    sharding=sharding, group_size=group_size, cephalo_shares=cephalo_shares,
                    cephalo_corrected_share_memory=cephalo_corrected_share_memory,
                    tensor_parallel=tensor_parallel, pipeline_stages=pipeline_stages,
                    micro_batches=micro_batches, pipeline_schedule=pipeline_schedule,
                    sequence_parallel=sequence_parallel)
    for name in ("max_micro_batch", "search_neighbours", "micro_batch", "group_size",
                 "tensor_parallel", "pipeline_stages", "micro_batches"):
        _count(name, keywords[name])
    for name in ("verify_with_simulator", "cephalo_corrected_share_memory", "sequence_parallel"):
        _switch(name, keywords[name], none_ok=True)
    for name in ("strategy", "offload", "accumulation", "activation_checkpointing", "sharding",
                 "cephalo_shares", "pipeline_schedule"):
        _word(name, keywords[name], none_ok=True)
    _word("compute_model", compute_model)
    _word("parallelism", parallelism, none_ok=True)
    _switch("use_all", use_all)
    _switch("text", text)
    given = [name for name, value in keywords.items() if value is not None]
    s = _with_stack(load_scenario(scenario), stack)
    _say(_cephalo.scenario_notices(s))
    out = _cephalo.plan_json(s, strategy or "optimal", compute_model, offload or "auto",
                             512 if max_micro_batch is None else max_micro_batch,
                             True if verify_with_simulator is None else verify_with_simulator,
                             24 if search_neighbours is None else search_neighbours, micro_batch,
                             accumulation or "", activation_checkpointing or "", sharding or "",
                             group_size, cephalo_shares or "min_params",
                             bool(cephalo_corrected_share_memory), parallelism or "", tensor_parallel,
                             pipeline_stages, micro_batches, pipeline_schedule or "",
                             bool(sequence_parallel), bool(use_all), given)
    return out if text else _record(out)


def simulate(scenario, plan, ops=False, compute_model="auto", link_sharing=True,
             queue="binary-heap", trace=None, stack=None, text=False):
    """Replays one iteration of `plan` on the scenario's modelled cluster: the SimResult record
    of `cephalo simulate --json` (iteration_time_s in seconds, samples_per_s, tokens_per_s,
    mfu as a fraction; per rank compute_s, comm_s, idle_s in seconds and peak_memory_bytes),
    with ops=True also per-op start_s / end_s (seconds; ops_frame() names each op).
    trace=path writes the Chrome/Perfetto trace `cephalo simulate --trace` writes (µs
    timeline, one track per rank and stream, memory counters); an output that is an input or
    cannot be written raises IoError before the replay. compute_model: "auto", "profile",
    "calibrated" or "roofline"; link_sharing=False gives every transfer its isolated time.
    stack=path is `--stack` (a calibrate_stack() file; its notes join "warnings").
    text=True returns the record's JSON text, the same bytes as `cephalo simulate --json
    [--ops]`."""
    for name, value in (("ops", ops), ("link_sharing", link_sharing), ("text", text)):
        _switch(name, value)
    _word("compute_model", compute_model)
    _word("queue", queue)
    s = _with_stack(load_scenario(scenario), stack)
    _say(_cephalo.scenario_notices(s))
    p, label = _plan_and_label(plan, s)
    out, columns, notices = _cephalo.simulate_json(s, p, label, ops, compute_model, link_sharing,
                                                   queue, _path("trace", trace))
    _say(notices)
    if text:
        return out
    record = _record(out)
    record._op_columns = columns
    return record


def _result_source(source):
    if _is_path(source):
        return "", _os.fspath(source), True
    return _text(source), _DICT_LABEL, False


def compare(simulated, measured, scenario=None, plan=None, trace=None, step=None):
    """Simulated vs measured (SimResult and RunResult records or files): the record of
    `cephalo compare --json`, each metric's two values (seconds, samples/s, bytes as its name
    says) and their relative error. With scenario and plan (both or neither), also per op
    class and op by op; trace=path then writes the Perfetto trace of `compare --trace` (both
    timelines of every rank side by side) and the record names it. measured may also be a
    PyTorch profiler trace file (`compare SIM TRACE`): one step of it (step="ProfilerStep#N"
    or N, default the median step) against the simulation, per class with scenario and plan."""
    s = load_scenario(scenario) if scenario is not None else None
    p, label = _plan_and_label(plan, s) if plan is not None else (None, "")
    out, notices = _cephalo.compare_json(*_result_source(simulated), *_result_source(measured),
                                         s, p, label, _path("trace", trace),
                                         "" if step is None else str(step))
    _say(notices)
    return _record(out)


def _with_stack(scenario, stack):
    return scenario if stack is None else _cephalo.with_stack(scenario, _path("stack", stack))


def load_stack(path):
    """A stack calibration file (`cephalo calibrate stack -o FILE`) as a dict, checked."""
    return _json.loads(_cephalo.stack_json(_os.fspath(path)))


def calibrate_stack(scenario, plan, measured_tokens_per_s=None, run=None, output=None,
                    compute_model="auto", trace=None, step=None):
    """`cephalo calibrate stack`: the factors of a software stack that one measured iteration
    of `plan` identifies. Give measured_tokens_per_s (the whole job's tokens/s: fits the
    compute factor), run (a RunResult record or file: with op records it fits the compute,
    collective and optimizer factors) or trace (a PyTorch profiler trace file, .json or
    .json.gz: `--trace`; step="ProfilerStep#N" or N picks the step, default the median one).
    Returns the fit (its "stack", the measured, predicted and fitted iteration seconds, and
    one note per factor); output=path also writes the stack file that plan(), simulate() and
    sweep() take as stack=. A measurement faster than the roofline, or one needing a factor
    outside [1/64, 10], raises InfeasibleError."""
    if sum(x is not None for x in (measured_tokens_per_s, run, trace)) != 1:
        raise ValueError("give one of measured_tokens_per_s, run and trace")
    if step is not None and trace is None:
        raise ValueError("step= needs trace=")
    measured_tokens_per_s = _number("measured_tokens_per_s", measured_tokens_per_s)
    _word("compute_model", compute_model)
    if step is not None and not isinstance(step, str):
        step = _count("step", step)
    s = load_scenario(scenario)
    _say(_cephalo.scenario_notices(s))
    p, _ = _plan_and_label(plan, s)
    run_text, run_label, run_is_file = _result_source(run) if run is not None else ("", "", False)
    return _record(_cephalo.calibrate_stack_json(
        s, p, measured_tokens_per_s, run_text, run_label, run_is_file,
        _path("output", output), compute_model, _path("trace", trace),
        "" if step is None else str(step)))


def sweep(spec, progress=None, max_mixes=5000, stack=None):
    """A what-if sweep (`cephalo sweep --spec FILE --json`): every mix of the spec's pool on
    every network option planned as plan() plans (both families unless the spec's
    "parallelism" or "strategy" fixes one; the split search bounded as the record's
    "split_search" says) and simulated, the Pareto frontier over (cost per hour, simulated
    samples/s) marked; .mixes_frame() is the table (NaN throughput where a mix is infeasible).
    progress(done, total, mix) is called after each mix; more than max_mixes mixes raise
    ValidationError before any is planned. stack=path prices every mix with that stack
    calibration (`--stack`)."""
    if not _is_path(spec):
        _refuse("spec", spec, "the path of a sweep spec file")
    max_mixes = _count("max_mixes", max_mixes, none_ok=False)
    if max_mixes < 1:
        _refuse("max_mixes", max_mixes, "an integer >= 1 (the most mixes to plan, as --max-mixes)")
    if progress is not None and not callable(progress):
        _refuse("progress", progress, "a function progress(done, total, mix), or None")
    return _record(_cephalo.sweep_json(_os.fspath(spec), max_mixes, progress,
                                       _path("stack", stack)))


def describe_model(model):
    """A catalog model (by name) or a Hugging Face config.json: architecture (layers, hidden,
    heads, ...) and parameter counts (total_parameters, a count of parameters), the record
    of `cephalo describe model NAME --json`."""
    return describe("model", model)


def describe(what, model=None):
    """The record of `cephalo describe WHAT [MODEL] --json`: what="gpus" (every GPU's datasheet:
    memory in bytes, FLOP/s, bandwidths in bytes/s), "models" (every catalog model's
    architecture and parameter counts), "model" with model= a catalog name or a config.json
    (as describe_model), or a scenario file (its job, cluster, parameter count and the
    warnings its predictions carry)."""
    if not _is_path(what):
        _refuse("what", what, '"gpus", "models", "model" or the path of a scenario file')
    if model is not None and not _is_path(model):
        _refuse("model", model, "a catalog name or the path of a config.json (or None)")
    return _json.loads(_cephalo.describe_json(_os.fspath(what),
                                              _path("model", model)))


def predict_layer(gpu, model, seq, micro_batch, dtype=None, source="auto", attention="flash",
                  fused_elementwise=True, compiled=False, framework="fsdp2", flash_kernel=None,
                  ops=False):
    """Per-layer forward / backward / recompute time of a model (catalog name, or the path of a
    Hugging Face config.json) on a catalog GPU (`cephalo predict layer --json`: forward_ms,
    backward_ms, recompute_ms in milliseconds per layer and micro-batch; seq in tokens,
    micro_batch in samples), for the stack
    named by attention ("flash" | "eager"), fused_elementwise, compiled and framework ("fsdp2" |
    "fsdp1" | "deepspeed_zero3" | "ddp"); the record's "implementation" says what was priced.
    dtype None: a config's torch_dtype, else fp16. "warnings" lists a dtype the GPU runs on a
    slower pipeline than asked (V100 bf16). flash_kernel ("flash-attn" | "cudnn", only with
    attention "flash"; None: flash-attn) is the flash-attention kernel. ops=True adds
    "op_classes" (`--ops`): the layer's priced time per op class against the datasheet
    roofline, as a DataFrame by the record's op_classes_frame().
    Bad values raise ValidationError naming the keyword and the allowed values."""
    fused_elementwise = _switch("fused_elementwise", fused_elementwise)
    ops = _switch("ops", ops)
    if _word("flash_kernel", flash_kernel, none_ok=True) == "":
        _refuse("flash_kernel", flash_kernel, "flash-attn or cudnn (or None: flash-attn)")
    compiled = _switch("compiled", compiled)
    seq, micro_batch = _count("seq", seq, none_ok=False), _count("micro_batch", micro_batch,
                                                                 none_ok=False)
    for name, value in (("gpu", gpu), ("source", source), ("attention", attention),
                        ("framework", framework)):
        _word(name, value)
    _word("dtype", dtype, none_ok=True)
    if not _is_path(model):
        _refuse("model", model, "a catalog name or the path of a config.json")
    return _record(_cephalo.layer_json(gpu, _os.fspath(model), seq, dtype or "", micro_batch,
                                       source,
                                       attention, fused_elementwise, compiled, framework,
                                       flash_kernel or "", ops))


def predict_3d(scenario, split, activation_checkpointing=None, dp_overlap="none",
               scatter_gather=True, compute_model="auto", stack=None,
               backward_at_forward_rate=False):
    """`cephalo predict 3d --json`: the first estimate of one iteration under a tensor x
    pipeline x data parallel split (a model split file, {"model_split": {...}}): iteration_s
    and makespan_s in seconds, per stage its times in seconds and memory terms in bytes, and
    whether it fits. activation_checkpointing "none" | "full" | "selective" (None: a plan
    file's own, which it may repeat but not contradict; a bare split's none), dp_overlap "none" |
    "last-backward" | "per-unit", scatter_gather=False for `--no-scatter-gather`; stack=path
    is `--stack`; backward_at_forward_rate=True for `--backward-at-forward-rate` (a
    diagnostic). A split that does not fit is returned (the CLI exits 3 after printing it)."""
    _word("activation_checkpointing", activation_checkpointing, none_ok=True)
    _word("dp_overlap", dp_overlap)
    _word("compute_model", compute_model)
    scatter_gather = _switch("scatter_gather", scatter_gather)
    backward_at_forward_rate = _switch("backward_at_forward_rate", backward_at_forward_rate)
    s = _with_stack(load_scenario(scenario), stack)
    _say(_cephalo.scenario_notices(s))
    if activation_checkpointing == "":
        expected = _cephalo.checkpointing_words_text() + ", or None (a plan file's own)"
        raise ValidationError(
            'arguments: activation_checkpointing: got "" (empty); expected ' + expected,
            file="arguments", json_path="activation_checkpointing", value='""',
            expected=expected)
    checkpointing = "" if activation_checkpointing is None else activation_checkpointing
    return _record(_cephalo.split_estimate_json(s, _os.fspath(split), checkpointing,
                                                dp_overlap, scatter_gather, compute_model,
                                                backward_at_forward_rate))


def predict_memory(scenario, plan):
    """The memory model's per-rank terms for a plan (`cephalo predict memory --json`), in
    bytes: per rank "terms_bytes" (training_state, activations, working_set, ...),
    total_bytes, capacity_bytes, usable_bytes, headroom_bytes and fits. .ranks_frame() has
    one column per term (training_state_bytes, ...), no dict in a cell."""
    s = load_scenario(scenario)
    p, label = _plan_and_label(plan, s)
    return _record(_cephalo.memory_json(s, p, label))


def predict_collective(scenario, kind, bytes, ranks=None, shares=None, uneven="auto",
                       sweep=None):
    """Time and bandwidth of one collective on the scenario's cluster (`cephalo predict
    collective --json`: seconds, algbw_bytes_per_s and busbw_bytes_per_s in bytes per
    second): bytes is a number of bytes or a string with a unit ("64MiB"); ranks the
    participants (default all), shares their slices summing to 1 (default even), uneven the
    variant for uneven shares ("auto": the cheaper of "grouped" and "padded"), sweep a
    measured collective sweep to calibrate the links with."""
    _word("kind", kind)
    _word("uneven", uneven)
    for name, value in (("ranks", ranks), ("shares", shares)):
        if value is not None and (isinstance(value, (str, dict))
                                  or not hasattr(value, "__iter__")):
            _refuse(name, value, "a list of numbers (or None)")
    s = load_scenario(scenario)
    _say(_cephalo.cluster_notices(s))
    # str, not repr: numpy 2 writes repr(numpy.float64(1e6)) as "np.float64(1000000.0)".
    size = bytes if isinstance(bytes, str) else str(bytes)
    return _record(_cephalo.collective_json(
        s, kind, size, None if ranks is None else list(ranks),
        None if shares is None else list(shares), uneven,
        _path("sweep", sweep)))


# Every public function says the start-up cache's note (the CLI's main says it for every
# command), so no entry point can skip it.
for _name in __all__:
    if callable(globals()[_name]) and not isinstance(globals()[_name], type):
        globals()[_name] = _noting_the_cache(globals()[_name])
del _name
