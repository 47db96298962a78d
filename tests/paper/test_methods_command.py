"""``pall-methods`` lists every registered method (a plugin's too) with its exactness, model
size and the seconds of the timing report it reads."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from pall_avalanche.catalog import METHOD_INFO
from pall_avalanche.paper import methods

ROOT = Path(__file__).resolve().parents[2]


def _row(text: str, name: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith(f"| `{name}` |"))
    return [cell.strip() for cell in line.strip("|").split(" | ")]


def test_every_method_is_listed_with_the_committed_timing_reports_seconds(capsys):
    text = methods.main([])
    with open(ROOT / "reports" / "table_timing_digits.csv", newline="") as f:
        timing = {row["method"]: row for row in csv.DictReader(f)}
    assert "Hardware: " in text and "table_timing_digits.csv" in text
    for name, info in METHOD_INFO.items():
        row = _row(text, name)
        assert row[1:4] == [info.label, "yes" if info.exact else "no",
                            info.size.replace("|", "\\|")]
        if name in timing:
            learn = float(timing[name]["learn_s_mean"])
            ratio = learn / float(timing["sequential"]["learn_s_mean"])
            assert row[4] == f"{learn:.4f} (× {ratio:.1f})"
            assert row[5] == f"{float(timing[name]['unlearn_s_mean']):.4f}"
        else:
            assert row[4:] == ["—", "—"]


def test_a_plugins_method_is_listed_and_no_timing_lists_without_seconds():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "methods.py"), "--plugin",
                          str(ROOT / "examples" / "l2_init_plugin.py"), "--no-timing"],
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert _row(out, "l2_init")[1:] == ["L2-init", "no", "d", "—", "—"]
    assert _row(out, "pall")[4:] == ["—", "—"]
    assert out.startswith("Seconds: no timing report")


@pytest.mark.parametrize("content, message", [
    (None, "no such file"),
    ("method,A_l_mean\nsequential,90\n", "not a timing report"),
])
def test_a_bad_timing_file_is_refused_in_one_line(tmp_path, content, message):
    path = tmp_path / "timing.csv"
    if content is not None:
        path.write_text(content)
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "methods.py"), "--timing",
                          str(path)], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 2 and run.stdout == ""
    assert len(run.stderr.strip().splitlines()) == 1
    assert message in run.stderr and f"--timing {path}" in run.stderr
