"""Every note and warning the CLI prints on stderr reaches a Python caller of the same call:
as a cephalo.CephaloWarning with the same text, or in the returned record ("warnings",
"notes"), and Python says nothing the CLI does not (tests/README.md, "Hostile input, round
seven")."""

import json
import os
import pathlib
import subprocess
import sys
import warnings

import pytest

import cephalo
from support import CLI, DEFAULT, SCENARIOS

MIX_SPLIT_PLAN = SCENARIOS / "plans/modern-mix-gpt2.7b-3d.json"
DEFAULT_PLAN = SCENARIOS / "plans/default-even.json"
CACHE_NOTE = "note: the start-up cache entry "


def _cli_notices(args):
    """The note / warning lines the CLI prints on stderr (the start-up cache's note aside: the
    test's processes share no cache state, and a test of its own covers it)."""
    env = dict(os.environ, CEPHALO_CACHE="off")
    done = subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, env=env,
                          check=False)
    assert done.returncode == 0, done.stderr
    return [line for line in done.stderr.splitlines()
            if line.startswith(("note: ", "warning: ")) and not line.startswith(CACHE_NOTE)]


def _python_notices(call):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = call()
    said = [str(w.message) for w in caught if issubclass(w.category, cephalo.CephaloWarning)]
    return [line for line in said if not line.startswith(CACHE_NOTE)], result, caught


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """modern-mix with every node's NIC given without "count" (the cluster note), its even
    plan, a bare split file of the shipped 3D plan, and a simulation and a measured run of the
    default scenario whose implementations differ."""
    d = tmp_path_factory.mktemp("notices")
    cluster = json.loads((SCENARIOS / "clusters/modern-mix.json").read_text())
    for node in cluster["nodes"]:
        del node["nic"]["count"]
    (d / "cluster.json").write_text(json.dumps(cluster))
    scenario = d / "nic-total.json"
    scenario.write_text(json.dumps({
        "name": "nic-total", "cluster": "cluster.json",
        "job": str(SCENARIOS / "jobs/gpt-2.7b-s2048.json")}))
    plan = d / "nic-total.plan.json"
    subprocess.run([CLI, "plan", "--scenario", scenario, "--strategy", "even", "-o", plan],
                   check=True, capture_output=True)
    split = d / "split.json"
    split.write_text(json.dumps(
        {"model_split": json.loads(MIX_SPLIT_PLAN.read_text())["model_split"]}))
    sim = json.loads(subprocess.run(
        [CLI, "simulate", "--json", "--scenario", DEFAULT, "--plan", DEFAULT_PLAN],
        check=True, capture_output=True, text=True).stdout)
    (d / "sim.json").write_text(json.dumps(sim))
    run = dict(sim, source="cpu", implementation="eager, unfused")
    (d / "run.json").write_text(json.dumps(run))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cephalo.CephaloWarning)  # the rows below check them
        tokens = cephalo.simulate(scenario, plan)["tokens_per_s"]
    return {"dir": d, "scenario": scenario, "plan": plan, "split": split, "tokens": tokens}


# One row per CLI command that prints a note or warning on stderr beside its answer: its
# arguments and the Python call of the same inputs.
CASES = [
    ("plan", lambda i: ["plan", "--scenario", i["scenario"], "--strategy", "even", "--json"],
     lambda i: cephalo.plan(i["scenario"], strategy="even")),
    ("plan, a dtype the GPU prices slower", lambda i: ["plan", "--scenario", DEFAULT,
                                                       "--strategy", "even", "--json"],
     lambda i: cephalo.plan(DEFAULT, strategy="even")),
    ("simulate", lambda i: ["simulate", "--scenario", i["scenario"], "--plan", i["plan"]],
     lambda i: cephalo.simulate(i["scenario"], i["plan"])),
    ("simulate, a split replayed rank by rank",
     lambda i: ["simulate", "--scenario", SCENARIOS / "modern-mix-gpt2.7b.json", "--plan",
                MIX_SPLIT_PLAN],
     lambda i: cephalo.simulate(SCENARIOS / "modern-mix-gpt2.7b.json", MIX_SPLIT_PLAN)),
    ("predict 3d", lambda i: ["predict", "3d", "--scenario", i["scenario"], "--split",
                              i["split"], "--json"],
     lambda i: cephalo.predict_3d(i["scenario"], i["split"])),
    ("predict collective", lambda i: ["predict", "collective", "--scenario", i["scenario"],
                                      "--kind", "all-gather", "--bytes", "1GiB"],
     lambda i: cephalo.predict_collective(i["scenario"], "all-gather", "1GiB")),
    ("calibrate stack", lambda i: ["calibrate", "stack", "--scenario", i["scenario"], "--plan",
                                   i["plan"], "--measured-tokens-per-s", i["tokens"] * 0.8,
                                   "-o", i["dir"] / "stack.json"],
     lambda i: cephalo.calibrate_stack(i["scenario"], i["plan"],
                                       measured_tokens_per_s=i["tokens"] * 0.8)),
    ("compare, another implementation measured",
     lambda i: ["compare", i["dir"] / "sim.json", i["dir"] / "run.json", "--scenario", DEFAULT,
                "--plan", DEFAULT_PLAN],
     lambda i: cephalo.compare(i["dir"] / "sim.json", i["dir"] / "run.json", scenario=DEFAULT,
                               plan=DEFAULT_PLAN)),
]


@pytest.mark.parametrize("name,cli_args,python_call", CASES, ids=[c[0] for c in CASES])
def test_every_note_the_cli_prints_reaches_python(inputs, name, cli_args, python_call):
    printed = _cli_notices(cli_args(inputs))
    assert printed, f"{name}: the case must make the CLI print a note or warning"
    said, record, caught = _python_notices(lambda: python_call(inputs))
    in_record = [*record.get("warnings", []), *record.get("notes", [])]
    for line in printed:
        text = line.split(": ", 1)[1]
        assert line in said or text in in_record, f"{name}: {line!r} reached no Python caller"
    assert set(said) <= set(printed), f"{name}: Python said more than the CLI: {said}"
    # Blamed on the caller's line, not on the module's own frames.
    for w in caught:
        assert pathlib.Path(w.filename).name == pathlib.Path(__file__).name, w.filename


def test_describe_carries_the_notes_its_text_prints(inputs):
    text = subprocess.run([CLI, "describe", inputs["scenario"]], check=True, capture_output=True,
                          text=True).stdout
    notes = [line[len("note: "):] for line in text.splitlines() if line.startswith("note: ")]
    assert notes
    assert cephalo.describe(inputs["scenario"])["notes"] == notes
    cli_record = json.loads(subprocess.run([CLI, "describe", inputs["scenario"], "--json"],
                                           check=True, capture_output=True, text=True).stdout)
    assert cli_record["notes"] == notes
    assert cephalo.describe(DEFAULT)["notes"] == []


_CACHE_PROBE = """
import json, sys, warnings
import cephalo
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    plan = cephalo.load_plan(sys.argv[2])
    cephalo.simulate(sys.argv[1], plan)
    cephalo.simulate(sys.argv[1], plan)
print(json.dumps([str(w.message) for w in caught
                  if issubclass(w.category, cephalo.CephaloWarning)
                  and str(w.message).startswith("note: the start-up cache")]))
"""


def test_the_start_up_cache_note_reaches_python_once(tmp_path):
    """A corrupt entry at the start-up cache's name: the CLI says so as it ends; Python said
    nothing (the entry was refitted and rewritten in silence). Now the first public call that
    found it says the CLI's line, once per process. (The module is another build than the CLI,
    so its entry has a name of its own in the same folder.)"""
    cache = tmp_path / "cache"
    env = dict(os.environ, CEPHALO_CACHE="on", CEPHALO_CACHE_DIR=str(cache))
    sim = [CLI, "simulate", "--scenario", DEFAULT, "--plan", DEFAULT_PLAN]
    probe = [sys.executable, "-c", _CACHE_PROBE, str(DEFAULT), str(DEFAULT_PLAN)]
    subprocess.run(sim, env=env, check=True, capture_output=True)
    assert json.loads(subprocess.run(probe, env=env, check=True, capture_output=True,
                                     text=True).stdout) == []
    entries = sorted(cache.iterdir())
    assert len(entries) == 2, entries  # the CLI's and the module's

    def corrupt_every_entry():
        for entry in entries:
            data = bytearray(entry.read_bytes())
            data[len(data) // 2] ^= 0xFF
            entry.write_bytes(bytes(data))

    def why(note):  # the note past the entry's name, which differs between the two builds
        assert note.startswith(CACHE_NOTE + str(cache) + "/"), note
        return note.split(".bin ", 1)[1]

    corrupt_every_entry()
    cli_err = subprocess.run(sim, env=env, check=True, capture_output=True, text=True).stderr
    cli_notes = [line for line in cli_err.splitlines() if line.startswith(CACHE_NOTE)]
    assert len(cli_notes) == 1, cli_err
    done = subprocess.run(probe, env=env, check=True, capture_output=True, text=True)
    said = json.loads(done.stdout)
    assert len(said) == 1, done.stderr  # two calls, one note
    assert why(said[0]) == why(cli_notes[0])
    assert "fails its checksum" in said[0]
    # The entry was rewritten: a later process finds it good and says nothing.
    assert json.loads(subprocess.run(probe, env=env, check=True, capture_output=True,
                                     text=True).stdout) == []
