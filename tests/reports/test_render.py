"""Rendering tables (pall_avalanche.reports.render): Markdown, LaTeX, CSV, legends and size
symbols, on hand-made records."""

from __future__ import annotations

import pandas as pd
import pytest
from helpers import BUILT_IN_METHODS, make_strategy
from report_data import (
    FLAGGED,
    M1,
    M2,
    checks,
    make_record,
)

from pall_avalanche import reports as report
from pall_avalanche.reports.render import legend


def test_format_wide_markdown_latex_and_write(tmp_path):
    records = [make_record("pall", 0, M1, point="N_u=1"), make_record("pall", 1, M2, point="N_u=1"),
               make_record("sequential", 0, M2, point="N_u=2")]
    frame = report.summary_frame(records, ("point", "method"))
    cells = report.format_table(frame, {"A_l": "A_l ↑", "A_u": "A_u ↓", "seeds": "Seeds"},
                                index={"label": "Method", "point": "N_u"})
    assert cells.to_dict("records") == [
        {"Method": "PALL", "N_u": "N_u=1", "A_l ↑": "85.00 ± 7.07",
         "A_u ↓": "*Exact* (45.00 ± 7.07)", "Seeds": "2"},
        {"Method": "Sequential", "N_u": "N_u=2", "A_l ↑": "80.00", "A_u ↓": "40.00",
         "Seeds": "1"}]
    wide = report.wide_table(cells, row="Method", column="N_u")
    assert list(wide.columns) == ["Method", "N_u=1 A_l ↑", "N_u=1 A_u ↓", "N_u=1 Seeds",
                                  "N_u=2 A_l ↑", "N_u=2 A_u ↓", "N_u=2 Seeds"]
    assert wide.iloc[1].tolist() == ["Sequential", "—", "—", "—", "80.00", "40.00", "1"]
    assert report.to_markdown(cells).splitlines()[2] == (
        "| PALL | N_u=1 | 85.00 ± 7.07 | *Exact* (45.00 ± 7.07) | 2 |")
    latex = report.to_latex(cells, "cap")
    assert r"PALL & N\_u=1 & 85.00 $\pm$ 7.07 & \textit{\textbf{Exact}} (45.00 $\pm$ 7.07)" \
        in latex and r"\begin{tabular}{lcccc}" in latex
    preamble = report.provenance(records, title="T", command="python x.py --a",
                                 notes=["note"])
    assert "Command: `python x.py --a`" in preamble and "REDUCED" in preamble
    assert "Seeds: [0, 1] (3 runs)" in preamble and "cpu (Test CPU, 1 threads)" in preamble
    report.write_report(tmp_path / "t", preamble=preamble, numbers=frame, cells=cells)
    assert (tmp_path / "t.md").read_text().startswith("# T\n")
    assert pd.read_csv(tmp_path / "t.csv")["A_l_mean"].tolist() == [85.0, 80.0]
    assert (tmp_path / "t.tex").read_text().startswith("% # T\n")
    # the legend explains every metric column shown, and only those
    markdown = (tmp_path / "t.md").read_text()
    assert "- A_l ↑: mean accuracy (%) on the tasks still learned at the end" in markdown
    assert "*Exact* (x): the method unlearns exactly" in markdown and "F_l ↓:" not in markdown


def test_no_negative_zero_and_metrics_in_math_mode():
    assert report.format_mean_std(-0.004, 0.01) == "0.00 ± 0.01"
    assert report.format_mean_std(-0.006, None) == "-0.01"
    cells = pd.DataFrame({"Method": ["PALL"], "A_l^min": ["1"], "F_u^max ↓": ["2"],
                          "cifar10 F_u ↓": ["3"]})
    header = report.to_latex(cells).splitlines()[2]
    assert header == (r"Method & $A_l^{\min}$ & $F_u^{\max}$ $\downarrow$ & "
                      r"cifar10 $F_u$ $\downarrow$ \\")


@pytest.mark.parametrize("method", BUILT_IN_METHODS)
def test_a_methods_size_symbol_says_how_its_measured_size_grows(method):
    # Table 1's symbol is checked against what the strategy measures with 1, 2 and 5 active
    # tasks: d stays put, d + M_i adds mask bits per task, d × |Ω_i| adds a model per task,
    # d × (1 + |Ω_T|) one beside the main model per (temporary) task, d + E_i and h + E_i a
    # fixed number of floats (an embedding) per task
    strategy, _, _ = make_strategy(method, measured=False)
    (floats_1, bits_1), (floats_2, _), (floats_5, bits_5) = (
        strategy.inference_size(n) for n in (1, 2, 5))
    symbol = report.model_size_symbol(method)
    if symbol == "d":
        assert (floats_1, bits_1) == (floats_5, bits_5) and bits_1 == 0
    elif symbol == "d + M_i":
        assert floats_1 == floats_5 and bits_1 > 0 and bits_5 == 5 * bits_1
    elif symbol == "d × |Ω_i|":
        assert floats_5 == 5 * floats_1 and bits_5 == bits_1 == 0
    elif symbol == "d × (1 + |Ω_T|)":
        assert floats_5 == 3 * floats_1 and bits_5 == bits_1 == 0
    else:
        assert symbol in ("d + E_i", "h + E_i") and bits_5 == bits_1 == 0
        assert floats_5 - floats_1 == 4 * (floats_2 - floats_1) > 0


def test_failed_learning_checks_are_marked_in_tables_csv_legend_and_summary(tmp_path):
    from pall_avalanche.paper.kit import closing_summary

    frame = report.summary_frame(FLAGGED, ("method",))
    assert frame["learning_failed"].tolist() == [1, 0]
    cells = report.format_table(frame, {"A_l": "A_l ↑", "seeds": "Seeds"})
    assert cells.to_dict("records") == [
        {"Method": "PALL", "A_l ↑": "85.00 ± 7.07 †1/2", "Seeds": "2"},
        {"Method": "Sequential", "A_l ↑": "80.00", "Seeds": "1"}]
    # a table without A_l marks the row's label
    assert report.format_table(frame, {"seeds": "Seeds"})["Method"].tolist() == [
        "PALL †1/2", "Sequential"]
    markdown = report.write_report(tmp_path / "r", preamble="# T\n\n", numbers=frame,
                                   cells=cells)
    legend_line = ("- †k/n: k of the n records of this row left a task at chance right after "
                   "learning it (see the records' learning_checks); the row's numbers include "
                   "them\n")
    assert markdown.count(legend_line) == 1
    assert pd.read_csv(tmp_path / "r.csv")["learning_failed"].tolist() == [1, 0]
    assert r"85.00 $\pm$ 7.07 \dag{}1/2" in (tmp_path / "r.tex").read_text()
    clean = report.summary_frame(FLAGGED[1:], ("method",))
    assert "†" not in legend(report.format_table(clean, {"A_l": "A_l ↑"}))

    def record(method, a_l, checks):
        return {"method": method, "exact": False, "metrics": {"A_l": a_l, "A_u": None},
                "learning_checks": checks}

    assert closing_summary({"ran": 3}, [record("er", 80.0, checks(True)),
                                        record("er", 90.0, checks(False)),
                                        record("gem", 70.0, None)]) == (
        "ran 3, reused 0 records; best A_l 85.00 (ER); 1 of 3 records left a task at chance "
        "right after learning it († in the table; see learning_checks)")


@pytest.mark.parametrize("name, changed, label", [
    ("cifar10", (), "— the paper's protocol"),
    ("cifar10", ("epochs",), "with epochs changed on the command line"),
    ("digits", (), "REDUCED CPU-scale run"),
    ("digits_in_order", (), "digits_in_order: not one of the paper's benchmarks "
                            "(cifar10, cifar100, tinyimagenet), so not the paper's protocol"),
])
def test_only_a_paper_benchmark_at_its_configuration_is_the_papers_protocol(name, changed,
                                                                            label):
    record = {"config": {"benchmark": name, "n_tasks": 5, "epochs": 20,
                         "train_per_task": None, "model": "resnet18"},
              "seed": 0, "device": {"type": "cpu", "name": "x", "threads": 1}}
    preamble = report.provenance([record], title="T", command="c", changed=changed)
    assert label in preamble
    assert ("the paper's protocol" in preamble.replace("not the paper's protocol", "")) == (
        name == "cifar10" and not changed)
