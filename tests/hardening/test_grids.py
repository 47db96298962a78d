"""A grid finishes the runs that did not diverge: its report names the diverged ones, and the
exit status says the report is partial (3); Ctrl-C ends in one line (130)."""

from __future__ import annotations

import json

import pytest
from helpers import benchmark_script

from pall_avalanche.exit_codes import EXIT_RUNS_LEFT_OUT

FAST = ["--set", "epochs=1", "--set", "train_per_task=30", "--quiet", "--jobs", "1",
        "--seeds", "0", "1"]


def test_a_diverged_run_leaves_the_others_in_the_report(tmp_path, capsys):
    table1 = benchmark_script("table1")
    with pytest.raises(SystemExit) as exit_info, pytest.warns(UserWarning, match="left out"):
        table1.cli(["--methods", "sequential,independent", "--set", "methods.sequential.lr=1e30",
                    "--out", str(tmp_path), *FAST])
    assert exit_info.value.code == EXIT_RUNS_LEFT_OUT
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("table1.py: 2 run(s) diverged and are left out of the report "
                              "(no record; a rerun tries them again): sequential seed 0: ")
    report = (tmp_path / "table1_digits.md").read_text()
    assert "Left out: 2 run(s) diverged and have no record" in report
    rows = [line for line in report.splitlines() if line.startswith("| ")][1:]
    assert [row.split(" | ")[0] for row in rows] == ["| Independent"]
    records = [json.loads(p.read_text()) for p in tmp_path.rglob("seed*.json")]
    assert sorted((r["method"], r["seed"]) for r in records) == [("independent", 0),
                                                                 ("independent", 1)]


def test_ctrl_c_ends_in_one_line(tmp_path, capsys, monkeypatch):
    from pall_avalanche.runs import batch

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(batch, "run_and_write", interrupt)
    with pytest.raises(SystemExit) as exit_info:
        benchmark_script("table1").cli(["--methods", "sequential", "--out", str(tmp_path),
                                        *FAST])
    assert exit_info.value.code == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["table1.py: interrupted; the finished records are kept, and a rerun of the "
                   "same command reuses them and resumes the others from their checkpoints"]


@pytest.mark.slow   # worker processes start (torch and Avalanche imported in each)
def test_ctrl_c_to_the_parent_alone_stops_its_workers(tmp_path):
    """SIGINT to the parent process only (not its process group): the workers are stopped,
    the command ends within seconds in one line, exit 130."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "table1.py"
    process = subprocess.Popen(
        [sys.executable, str(script), "--methods", "sequential,independent", "--seeds", "0",
         "1", "2", "3", "--set", "epochs=30", "--jobs", "2", "--quiet", "--out", str(tmp_path)],
        stderr=subprocess.PIPE, text=True, start_new_session=True,
        env={**os.environ, "HOME": str(tmp_path)})
    deadline = time.monotonic() + 120
    while not list(tmp_path.rglob("*.lock")) and time.monotonic() < deadline:
        time.sleep(0.2)                  # a worker is computing a record
    time.sleep(1.0)
    os.kill(process.pid, signal.SIGINT)
    sent = time.monotonic()
    _, err = process.communicate(timeout=60)
    assert time.monotonic() - sent < 10
    assert process.returncode == 130
    assert err.strip().splitlines()[-1].startswith("table1.py: interrupted; the finished "
                                                   "records are kept")
