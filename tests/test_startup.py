"""Commands start without torch: --help, a refusal of bad input and reading records import
neither torch nor Avalanche (checked in fresh interpreters); the installed console commands
exist for every script; every entry of the torch-free catalog loads and agrees with its code.
The test session itself imports Avalanche only once its conftest gave it a temporary HOME."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from helpers import FAST_CONFIG, seq

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "avalanche", "torchvision", "timm")

# Runs a script as ``python <script> ARGS`` would, then reports its exit code and which heavy
# packages ended up imported.
PROBE = """\
import json, runpy, sys
script, args = sys.argv[1], sys.argv[2:]
sys.argv = [script, *args]
try:
    runpy.run_path(script, run_name="__main__")
    code = 0
except SystemExit as done:
    code = done.code
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(HEAVY))
print(json.dumps({"code": code, "heavy": heavy}), file=sys.__stdout__)
""".replace("HEAVY", repr(HEAVY))


def probe(script: Path, *args: str, cwd: Path) -> dict:
    result = subprocess.run([sys.executable, "-c", PROBE, str(script), *args], cwd=cwd,
                            capture_output=True, text=True, timeout=120)
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("args, code", [
    (["--help"], 0),
    (["--set", "alpha=abc"], 2),
    (["--epochs", "0"], 2),
    (["--methods", "palll"], 2),
    (["--benchmark", "mnist"], 2),
    (["--set", "methods.pall.buffer_size=3"], 2),   # a cross-key check of the run config
])
def test_table1_parses_and_refuses_without_torch(tmp_path, args, code):
    out = probe(ROOT / "benchmarks" / "table1.py", *args, "--out", str(tmp_path / "o"),
                cwd=tmp_path)
    assert out == {"code": code, "heavy": []}


@pytest.mark.parametrize("script, args, code", [
    *[(s, ["--help"], 0) for s in sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py"))],
    ("audit", ["--n-unlearn", "2"], 2),
    ("perf_masking", ["--tasks", "9"], 2),
    ("perf_masking", ["--table", "--columns", "mnist"], 2),
    ("perf_masking", ["--table", "--table-images", "0"], 2),
])
def test_every_script_helps_and_refuses_without_torch(tmp_path, script, args, code):
    out = probe(ROOT / "benchmarks" / f"{script}.py", *args, cwd=tmp_path)
    assert out == {"code": code, "heavy": []}


def test_reading_records_and_writing_the_report_needs_no_torch(tmp_path):
    from pall_avalanche.runs import record_path, run_record

    record = run_record("sequential", 0, {**FAST_CONFIG, "epochs": 1, "train_per_task": 40},
                        requests=seq("L0 L1 U0"))
    path = record_path(tmp_path / "results", "sequential", 0, FAST_CONFIG, seq("L0 L1 U0"))
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(record))
    code = (f"import runpy, sys; sys.argv = ['report', {str(tmp_path / 'results')!r}, "
            f"'--out', {str(tmp_path / 'report')!r}]\n"
            "try:\n    runpy.run_module('pall_avalanche.reports', run_name='__main__')\n"
            "except SystemExit as e:\n    assert e.code == 0, e.code\n"
            f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"
    assert "| Sequential |" in (tmp_path / "report.md").read_text()


def test_every_script_is_an_installed_command():
    commands = {ep.name: ep.value for ep in metadata.entry_points(group="console_scripts")
                if ep.name.startswith("pall-")}
    scripts = {p.stem for p in (ROOT / "benchmarks").glob("*.py")}
    expected = {f"pall-{s.replace('_', '-')}": f"pall_avalanche.paper.{s}:cli" for s in scripts}
    expected["pall-report"] = "pall_avalanche.reports:cli"
    expected["pall-sweeps"] = "pall_avalanche.sweeps:cli"
    expected["pall-check-method"] = "pall_avalanche.check_method:cli"
    assert commands == expected


def test_an_installed_command_runs_from_any_folder(tmp_path):
    result = subprocess.run(["pall-table1", "--epochs", "0"], capture_output=True, text=True,
                            cwd=tmp_path, timeout=120)
    assert result.returncode == 2
    assert result.stderr.startswith("pall-table1: error: --epochs 0: epochs")
    assert list(tmp_path.iterdir()) == []


def test_the_suite_imports_avalanche_only_under_its_own_home():
    # importing avalanche writes ~/.avalanche/config.json: before the conftest's HOME, the
    # user's own (a warning category in pyproject's filterwarnings did that)
    import conftest

    assert not conftest.AVALANCHE_BEFORE_HOME
