"""Every result a tutorial quotes comes from a command this test runs — the README's sample
rows of the quick check (the first tutorial includes them) and the own-method tutorial's A_u
of L2-init and Sequential — or, for the audit tutorial's first verdict, from the
committed report of its command. (The README's Avalanche block, which the Avalanche tutorial
includes, prints its own expected line: tests/e2e/test_readme.py.) Quoted and printed agree
within a point: another CPU's vector kernels may flip a test sample."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from helpers import benchmark_script

ROOT = Path(__file__).resolve().parents[2]


def table_rows(text: str) -> dict[str, list[str]]:
    """Label → cells of every body row of the Markdown tables in ``text``."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and cells[0] not in ("Method",) and not set(cells[0]) <= {"-"}:
            rows[cells[0]] = cells[1:]
    return rows


def numbers(cells: list[str]) -> list[float]:
    return [float(n) for cell in cells for n in re.findall(r"-?\d+\.\d+", cell)]


def printed_table(args: list[str], tmp_path: Path, capsys) -> dict[str, list[str]]:
    with pytest.raises(SystemExit) as done:
        benchmark_script("table1").cli([*args, "--quiet", "--jobs", "1",
                                        "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert done.value.code == 0, out
    return table_rows(out)


def test_the_readmes_sample_rows_are_the_quick_checks(tmp_path, capsys):
    readme = (ROOT / "README.md").read_text()
    sample = readme[readme.index("[start:sample]"):readme.index("[end:sample]")]
    assert "python benchmarks/table1.py --epochs 2 --seeds 0 --quiet --out /tmp/quick" in sample
    quoted = table_rows(sample)
    assert len(quoted) == 5
    # the quoted rows' methods (PALL at its three α, the other two rows unquoted)
    printed = printed_table(["--epochs", "2", "--seeds", "0", "--methods",
                             "sequential,ewc,wsn,pall,independent"], tmp_path, capsys)
    for label, cells in quoted.items():
        assert numbers(printed[label]) == pytest.approx(numbers(cells), abs=1.0), label
        assert ("†" in printed[label][0]) == ("†" in cells[0]), label


def test_the_audit_tutorials_verdict_is_its_committed_report():
    """The audit tutorial's first verdict (a five-minute command) is quoted from the report that
    command wrote, committed with its command line."""
    tutorial = " ".join((ROOT / "docs" / "tutorials" / "audit.md").read_text().split())
    command = ("python benchmarks/audit.py --plugin examples/l2_init_plugin.py --methods "
               "l2_init --jobs 2")
    assert command in tutorial
    report = (ROOT / "reports" / "l2_init" / "audit_digits.md").read_text()
    assert (f"Command: `{command} --out results/audit_l2_init --report-dir reports/l2_init`"
            in report)
    row = pd.read_csv(ROOT / "reports" / "l2_init" / "audit_digits.csv").set_index(
        "method").loc["l2_init"]
    quoted = re.search(r'verdict for L2-init: "([^"]+)" .* \(AUC (\d\.\d+), adjusted p '
                       r"(\d\.\d+)[;)] .* \(gap to control \+(\d\.\d+), adjusted p "
                       r"(\d\.\d+)\)", tutorial)
    assert quoted, "the tutorial's verdict sentence changed: update this test with it"
    verdict, auc, auc_p, gap, gap_p = quoted.groups()
    assert verdict == row["verdict"]
    # as the report prints them: three decimals, p-values to three significant digits
    assert (auc, auc_p) == (f"{row['auc']:.3f}", f"{row['auc_p_adj']:.3g}")
    assert (gap, gap_p) == (f"{row['leak_auc']:.3f}", f"{row['leak_auc_p_adj']:.3g}")


def test_the_own_method_tutorials_numbers_are_its_commands(tmp_path, capsys):
    tutorial = (ROOT / "docs" / "tutorials" / "own-method.md").read_text()
    command = ("--plugin examples/l2_init_plugin.py --methods l2_init,sequential --epochs 2 "
               "--seeds 0")
    assert command in " ".join(tutorial.split())
    quoted = re.search(r"A_u (\d+\.\d+) against Sequential's (\d+\.\d+)", tutorial)
    printed = printed_table(["--plugin", str(ROOT / "examples" / "l2_init_plugin.py"),
                             "--methods", "l2_init,sequential", "--epochs", "2", "--seeds",
                             "0"], tmp_path, capsys)
    assert float(printed["L2-init"][1]) == pytest.approx(float(quoted[1]), abs=1.0)
    assert float(printed["Sequential"][1]) == pytest.approx(float(quoted[2]), abs=1.0)
