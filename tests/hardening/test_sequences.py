"""Every valid request sequence reports, also one after which no task is learned."""

from __future__ import annotations

import pytest
from helpers import benchmark_script

FAST = ["--set", "epochs=1", "--set", "train_per_task=30", "--quiet", "--jobs", "1",
        "--seeds", "0"]


@pytest.mark.parametrize("requests", ["L0 U0", "clpu:T0 F0"])
def test_a_sequence_that_leaves_nothing_learned_reports(tmp_path, capsys, requests):
    table1 = benchmark_script("table1")
    with pytest.raises(SystemExit) as exit_info:
        table1.cli(["--methods", "sequential,independent", "--requests", requests,
                    "--out", str(tmp_path), *FAST])
    out = capsys.readouterr()
    assert exit_info.value.code == 0, out.err
    rows = [line.split(" | ") for line in out.out.splitlines() if line.startswith("| ")][1:]
    assert [row[0] for row in rows] == ["| Sequential", "| Independent"]
    assert all(row[1].startswith("—") for row in rows)        # no A_l: nothing left learned
    assert (tmp_path / "table1_digits.png").stat().st_size > 0
    # the generic report of the same records, as the paper's Table 1
    from pall_avalanche.reports.command import main as report

    markdown = report(["--table1", str(tmp_path), "--out", str(tmp_path / "rep" / "t1")])
    assert "| Sequential |" in markdown and (tmp_path / "rep" / "t1.png").is_file()


def test_the_field_table_refuses_a_sequence_without_a_reference(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        benchmark_script("table_field").cli(["--methods", "sequential", "--requests", "L0 U0",
                                             "--out", str(tmp_path), *FAST])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(err) == 1
    assert "--requests L0 U0: every task it learns is unlearned, so the retrained reference" \
        in err[0]
    assert not list(tmp_path.rglob("seed*.json"))
