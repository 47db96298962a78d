"""The paper scripts (pall_avalanche.paper) end to end on tiny digits runs, Table A8 by hand,
and the scripts' kit (pall_avalanche.paper.kit)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pandas as pd
import pytest
from helpers import benchmark_script
from report_data import (
    cell,
    make_record,
)

from pall_avalanche import reports as report
from pall_avalanche.catalog import method_label
from pall_avalanche.requests import RequestSequence, generate_requests

TINY = ["--seeds", "0", "--set", "epochs=1", "--train-per-task", "30", "--quiet"]


# Table A8 from hand-made runs of 3 tasks: method -> per seed (requests, accuracy matrix), rows
# after each request. Each seed's F_u^max: its largest a_{i-1,t} - a_{i,t} over unlearning
# requests i and remaining tasks t; A_l: the mean last row over the tasks still learned.
WORST_CASE_RUNS = {
    "sequential": [
        ("L0 L1 L2 U1", [[80, 10, 10], [70, 85, 10], [65, 80, 90], [65, 80, 90]]),  # 0, 0
        ("L0 L1 L2 U1", [[80, 10, 10], [72, 84, 10], [66, 80, 88], [67, 80, 87]]),  # -1, 1
        ("L0 L1 L2 U1", [[80, 10, 10], [70, 84, 10], [60, 79, 85], [58, 79, 86]]),  # 2, -1
    ],
    "pall": [
        ("L0 L1 L2 U1", [[90, 10, 10], [89, 80, 10], [89, 80, 70], [86, 50, 71]]),  # 3, -1
        ("L0 L1 U0 L2 U2", [[95, 10, 10], [94, 85, 10], [50, 78, 10],               # 7
                            [52, 77, 90], [51, 75, 48]]),                           # 2
    ],
}


def _worst_case_by_hand(text: str, accuracy: list[list[float]]) -> tuple[float, float]:
    """(A_l, F_u^max) of one run, by a loop over its requests."""
    active: list[int] = []
    drops = []
    for i, token in enumerate(text.split()):
        task = int(token[1:])
        if token[0] == "L":
            active.append(task)
        else:
            active.remove(task)
            drops += [accuracy[i - 1][t] - accuracy[i][t] for t in active]
    return sum(accuracy[-1][t] for t in active) / len(active), max(drops)


def test_worst_case_table_a8_by_hand():
    from helpers import seq

    from pall_avalanche.evaluation import compute_metrics
    from pall_avalanche.paper.table_worst_case import worst_case_table

    records = [make_record(method, seed, compute_metrics(acc, seq(text, 3)), accuracy=acc,
                       requests=text.split())
               for method, runs in WORST_CASE_RUNS.items()
               for seed, (text, acc) in enumerate(runs)]
    _, cells = worst_case_table(records)
    assert list(cells.columns) == ["Method", "A_l^min ↑", "F_u^max ↓ (mean over seeds)",
                                   "Seeds"]
    expected = []
    for method, runs in WORST_CASE_RUNS.items():
        a_l, f_u_max = zip(*(_worst_case_by_hand(text, acc) for text, acc in runs), strict=True)
        expected.append([method_label(method), f"{min(a_l):.2f}", cell(list(f_u_max)),
                         str(len(runs))])
    assert cells.values.tolist() == expected
    # PALL: A_l 78.5 and 75; F_u^max 3 and 7: their mean, not the worst seed's 7
    assert expected[1] == ["PALL", "75.00", "5.00 ± 2.83", "2"]
    assert expected[0][1:3] == ["72.00", "1.00 ± 1.00"]     # F_u^max 0, 1, 2


# ------------------------------------------------------------------ scripts end to end
SCRIPTS = {
    "fig3": ["--methods", "pall,independent", "--n-unlearn-grid", "1", "2"],
    "table_nf": ["--nf", "0", "5"],
    "table_retrained": [],
    "table_buffer_selection": ["--selections", "random", "herding"],
    "table_rehearsal": ["--methods", "er,pall", "--buffer-sizes", "20", "--betas", "0.5"],
    "table_er_retrain": ["--methods", "pall,er_retrain", "--set", "retrain_epochs=1"],
    "table_sparse": ["--methods", "static_sparse,pall"],
    "table_scalability": ["--methods", "sequential,pall", "--n-unlearn-grid", "2"],
    "table_timing": ["--methods", "sequential,pall"],
    "table_worst_case": ["--methods", "sequential,pall"],
    "table_field": ["--methods", "sequential,clpu_derpp"],
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_script_end_to_end(name, tmp_path, capsys):
    module = benchmark_script(name)
    argv = [*TINY, *SCRIPTS[name], "--out", str(tmp_path / "res"),
            "--report-dir", str(tmp_path / "rep")]
    markdown = module.main(argv)
    stem = tmp_path / "rep" / f"{name}_digits"
    for suffix in (".md", ".csv", ".tex"):
        assert Path(f"{stem}{suffix}").is_file()
    assert markdown == Path(f"{stem}.md").read_text()
    assert f"Command: `python benchmarks/{name}.py {' '.join(argv)}`" in markdown
    assert "REDUCED" in markdown and "Seeds: [0]" in markdown
    if name in ("fig3", "table_scalability", "table_timing"):
        assert Path(f"{stem}.png").stat().st_size > 1000
    # a rerun reuses every record: identical numbers
    first = pd.read_csv(f"{stem}.csv")
    module.main(argv)
    pd.testing.assert_frame_equal(first, pd.read_csv(f"{stem}.csv"))


def test_retrained_stats_reach_the_record(tmp_path):
    module = benchmark_script("table_retrained")
    module.main([*TINY, "--out", str(tmp_path / "res"), "--report-dir", str(tmp_path)])
    record = json.loads(next((tmp_path / "res").rglob("seed0.json")).read_text())
    assert len(record["unlearning_stats"]) == record["config"]["n_unlearn"]
    assert {"redrawn", "retrained", "retrained_fraction"} <= set(record["unlearning_stats"][0])
    markdown = (tmp_path / "table_retrained_digits.md").read_text()
    # the mlp backbone on 8x8 digits with a 5 x 2 head: d counted from the built model
    split = record["split"]
    from pall_avalanche.models import build_model, count_parameters
    d = count_parameters(build_model("mlp", input_shape=tuple(split["input_shape"]),
                                     n_tasks=5, classes_per_task=2))
    assert f"| # total params: d | {d:,} |" in markdown


def test_scalability_runs_pall_with_ten_retraining_steps(tmp_path):
    """Table A6 (and Fig. A1) use N_f = 10 for PALL (Table 2's caption); the other methods
    keep the configuration's N_f, and an explicit N_f wins."""
    module = benchmark_script("table_scalability")
    base = [*TINY, "--methods", "derpp,pall", "--n-unlearn-grid", "1"]
    for extra, expected in (([], 10), (["--n-retrain-iters", "5"], 5),
                            (["--set", "methods.pall.n_retrain_iters=7"], 7)):
        out = tmp_path / f"res{expected}"
        module.main([*base, *extra, "--out", str(out), "--report-dir", str(tmp_path)])
        records = {json.loads(p.read_text())["method"]: json.loads(p.read_text())
                   for p in out.rglob("seed0.json")}
        assert records["pall"]["config"]["n_retrain_iters"] == expected
        assert records["derpp"]["config"]["n_retrain_iters"] == (5 if extra[:1] == [
            "--n-retrain-iters"] else 50)


def test_field_table_has_its_columns_references_and_audit_verdicts(tmp_path):
    audit = tmp_path / "audit.csv"
    pd.DataFrame({"method": ["clpu_derpp"], "verdict": ["no leak found"]}).to_csv(audit)
    module = benchmark_script("table_field")
    module.main([*TINY, "--methods", "independent,clpu_derpp", "--unlearnable-age", "1",
                 "--audit-report", str(audit), "--out", str(tmp_path / "res"),
                 "--report-dir", str(tmp_path)])
    frame = pd.read_csv(tmp_path / "table_field_digits.csv")
    assert list(zip(frame["point"], frame["method"], strict=True)) == [
        ("paper", "independent"), ("paper", "clpu_derpp"), ("CLPU", "independent"),
        ("CLPU", "clpu_derpp")]
    # Independent deletes the unlearned task's model: its features are the retrained
    # reference's. CLPU-DER++'s reference in CLArena's form is DER++, whose main network
    # learned the remaining tasks; under the paper's protocol (every task temporary) the run's
    # main network never trained, so the unlearned task's features differ from the reference's
    paper = frame[frame["point"] == "paper"].set_index("method")
    assert abs(paper.loc["independent", "dd_euclidean_mean"]) < 1e-4
    assert paper.loc["independent", "dd_cka_mean"] < 1e-6
    assert paper.loc["clpu_derpp", "dd_euclidean_mean"] > 1e-3
    assert list(frame["audit_verdict"].fillna("")) == ["", "no leak found", "",
                                                       "no leak found"]
    markdown = (tmp_path / "table_field_digits.md").read_text()
    for column in ("DD eucl.", "1 − CKA", "AG", "ToW", "Size (MB)", "s / request", "Audit"):
        assert f" {column} |" in markdown
    rows = [line for line in markdown.splitlines() if line.startswith("| paper | CLPU-DER++")]
    assert len(rows) == 1 and "| *Exact* (" in rows[0]      # A_u as Table 1 prints it
    # per method and seed the run of each protocol and two references, both protocols' the
    # same (the same unlearned tasks): every task learned permanently, and every task but the
    # unlearned ones
    records = [json.loads(p.read_text()) for p in (tmp_path / "res").rglob("seed0.json")]
    assert len(records) == 2 * (2 + 2) and all("probe" in r for r in records)
    sequences = [RequestSequence(r["requests"], 5) for r in records
                 if r["method"] == "clpu_derpp"]
    unlearned = set(sequences[0].unlearned_tasks or sequences[1].unlearned_tasks)
    assert sorted(str(s) for s in sequences if len(s.permanent_tasks) == len(s)) == sorted([
        "P0 P1 P2 P3 P4", " ".join(f"P{t}" for t in range(5) if t not in unlearned)])
    # on the protocol's reference CLPU-DER++ is at distance 0 under the paper's protocol (the
    # main network untrained in both), and CLPU's never-unlearned reference makes the
    # unlearned tasks permanent as the others
    module.main([*TINY, "--methods", "clpu_derpp", "--unlearnable-age", "1",
                 "--references", "protocol", "--out", str(tmp_path / "res"),
                 "--report-dir", str(tmp_path / "protocol")])
    paper = pd.read_csv(tmp_path / "protocol" / "table_field_digits.csv").iloc[0]
    assert paper["point"] == "paper" and abs(paper["dd_euclidean_mean"]) < 1e-4
    records = [json.loads(p.read_text()) for p in (tmp_path / "res").rglob("seed0.json")]
    clpu = [RequestSequence(r["requests"], 5) for r in records
            if r["config"].get("unlearnable_age") == 1 and r["method"] == "clpu_derpp"]
    never = [s for s in clpu if not s.unlearned_tasks and len(s.learned_tasks) == 5]
    assert never == [generate_requests(5, 0, 0, unlearnable_age=1)]
    assert str(never[0]) == "L0 M0 L1 M1 L2 M2 L3 M3 L4"
    with pytest.raises(ValueError, match="--unlearnable-age 5 is invalid; valid: 1 .. 4"):
        module.main([*TINY, "--unlearnable-age", "5", "--out", str(tmp_path / "res")])


def test_closing_summary_counts_runs_and_names_the_best():
    from pall_avalanche.paper.kit import closing_summary

    def record(method, point, a_l, a_u, exact):
        return {"method": method, "point": point, "exact": exact,
                "metrics": {"A_l": a_l, "A_u": a_u}, "split": {"classes_per_task": 2}}

    records = [record("sequential", "Table 1", 80.0, 90.0, False),
               record("pall", "α=0.1", 96.0, 40.0, True), record("pall", "α=0.1", 98.0, 60.0, True),
               record("pall", "α=0.2", 95.0, 52.0, True)]
    assert closing_summary({"ran": 3, "reused": 1}, records) == (
        "ran 3, reused 1 records; best A_l 97.00 (PALL (α=0.1)); exact methods' A_u 50.7 % on "
        "average vs chance 50.0 %")


def test_report_module_cli(tmp_path):
    benchmark_script("table_nf").main([*TINY, "--nf", "0", "5", "--out", str(tmp_path / "res"),
                              "--report-dir", str(tmp_path)])
    markdown = report.main([str(tmp_path / "res"), "--out", str(tmp_path / "all")])
    assert "n_retrain_iters=0" in markdown and "n_retrain_iters=5" in markdown
    assert "Command: `python -m pall_avalanche.reports" in markdown
    assert (tmp_path / "all_heatmaps.png").is_file() and (tmp_path / "all.tex").is_file()


def test_bad_input_is_one_clear_error(tmp_path):
    with pytest.raises(ValueError, match=r"unknown selection\(s\) \['best'\]"):
        benchmark_script("table_buffer_selection").main([*TINY, "--selections", "best",
                                                "--out", str(tmp_path)])
    with pytest.raises(FileNotFoundError, match="does not exist"):
        report.main([str(tmp_path / "missing")])
    # A command-line value for a key the script sweeps would silently collapse the sweep.
    with pytest.raises(ValueError, match=r"the command line sets \['methods.pall.n_unlearn'\]"):
        benchmark_script("fig3").main([*TINY, "--n-unlearn-grid", "1", "2", "--set",
                              "methods.pall.n_unlearn=2", "--out", str(tmp_path)])
    assert not list(tmp_path.rglob("*.json"))


def test_the_quick_audit_writes_its_records_and_report_to_audit_quick():
    from pall_avalanche.paper.audit import quick_folders

    default = Path("results/audit")
    assert quick_folders(default, default) == (Path("results/audit_quick"),) * 2
    assert quick_folders(default, Path("reports")) == (Path("results/audit_quick"),
                                                       Path("reports"))
    assert quick_folders(Path("mine"), Path("mine")) == (Path("mine"), Path("mine"))


def test_a_run_of_fewer_methods_keeps_the_earlier_report(tmp_path):
    """Table 1 of two methods, then of one in the same folder: the second report replaces
    nothing — the first is kept under a dated name, with its figure, and a warning says so;
    a run of as many rows replaces the report silently."""
    table1 = benchmark_script("table1")
    out = ["--out", str(tmp_path), *TINY]
    table1.main(["--methods", "sequential,ewc", *out])
    first = (tmp_path / "table1_digits.md").read_text()
    figure = (tmp_path / "table1_digits.png").read_bytes()
    with pytest.warns(UserWarning, match=r"had rows this report lacks \(EWC\); the earlier "
                                         r"report is kept as table1_digits\.before-"):
        table1.main(["--methods", "sequential", *out])
    (kept,) = tmp_path.glob("table1_digits.before-*.md")
    assert kept.read_text() == first
    assert kept.with_suffix(".png").read_bytes() == figure
    assert {p.suffix for p in tmp_path.glob(f"{kept.stem}.*")} == {".md", ".csv", ".tex", ".png"}
    rows = [line.split(" | ")[0] for line in
            (tmp_path / "table1_digits.md").read_text().splitlines() if line.startswith("| ")]
    assert rows == ["| Method", "| Sequential"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")             # same rows: replaced, no warning
        table1.main(["--methods", "sequential", *out])
    assert len(list(tmp_path.glob("table1_digits.before-*.md"))) == 1
