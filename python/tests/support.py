"""What every module of the cephalo Python suite shares: where the checkout, the CLI and the
shipped scenarios are, and the CLI run whose output the Python calls are compared with."""

import os
import pathlib
import subprocess

ROOT = pathlib.Path(os.environ.get("CEPHALO_SOURCE_DIR", pathlib.Path(__file__).parents[2]))
CLI = os.environ.get("CEPHALO_CLI", str(ROOT / "build/bin/cephalo"))
SCENARIOS = ROOT / "scenarios"
DEFAULT = SCENARIOS / "default.json"
CPU2 = SCENARIOS / "cpu-2rank.json"
CPU2_PLAN = SCENARIOS / "plans/cpu-2rank-uneven.json"
MODELS = SCENARIOS / "models"


def cli(*args):
    done = subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout
