"""The paper scripts end to end on tiny digits runs, the report aggregation on hand-made
records, and the buffer selection strategies on hand-made inputs."""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from helpers import BUILT_IN_METHODS, make_strategy

from pall_avalanche import reports as report
from pall_avalanche.catalog import method_label
from pall_avalanche.rehearsal import SELECTIONS, select_exemplars
from pall_avalanche.reports.render import legend

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--seeds", "0", "--set", "epochs=1", "--train-per-task", "30", "--quiet"]


def _script(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}",
                                                  ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------ selection strategies
def test_entropy_confidence_logit_distance_pick_by_hand():
    targets = torch.tensor([0, 0, 0, 1, 1, 1])
    logits = torch.tensor([[5.0, 0.0], [0.1, 0.0], [2.0, 0.0],     # class 0
                           [0.0, 0.5], [0.0, 9.0], [1.0, 0.0]])    # class 1 (last: wrong)
    # entropy: closest to uniform → index 1 in class 0; index 3 (|0.5|) in class 1
    assert select_exemplars(targets, 2, "entropy", logits=logits).tolist() == [1, 3]
    # confidence: largest max-probability → index 0; index 4
    assert select_exemplars(targets, 2, "confidence", logits=logits).tolist() == [0, 4]
    # logit distance |z_y - max_other|: class 0 → 5, 0.1, 2 → index 1; class 1 → 0.5, 9, 1
    assert select_exemplars(targets, 2, "logit_distance", logits=logits).tolist() == [1, 3]
    # 4 samples: 2 per class, the two best of each
    assert select_exemplars(targets, 4, "logit_distance", logits=logits).tolist() == [1, 2, 3, 5]


def test_herding_picks_the_sample_nearest_the_mean_first():
    targets = torch.zeros(4, dtype=torch.long)
    # normalised: a=(1,0) b=(0,1) c=(.707,.707) d=(.995,.0995); class mean μ=(.676,.452)
    features = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [1.0, 0.1]])
    # k=1: ‖c−μ‖² = .066 < ‖d−μ‖² = .21 < ‖a−μ‖² = .31 < ‖b−μ‖² = .76
    assert select_exemplars(targets, 1, "herding", features=features).tolist() == [2]
    # k=2: ‖(c+d)/2−μ‖² = .033 < ‖(c+a)/2−μ‖² = .041 < ‖(c+b)/2−μ‖² = .265
    two = select_exemplars(targets, 2, "herding", features=features).tolist()
    assert two == [2, 3]
    assert sorted(select_exemplars(targets, 4, "herding", features=features).tolist()) == [
        0, 1, 2, 3]


def test_random_selection_is_class_balanced_with_remainder_first():
    torch.manual_seed(0)
    targets = torch.tensor([1, 0, 1, 0, 1, 0, 1, 1])
    picked = select_exemplars(targets, 5, "random")
    assert picked.tolist() == sorted(picked.tolist()) and len(set(picked.tolist())) == 5
    counts = torch.bincount(targets[picked], minlength=2).tolist()
    assert counts == [3, 2]


def test_selection_errors_name_the_bad_value():
    targets = torch.tensor([0, 1])
    with pytest.raises(ValueError, match=r"unknown buffer selection 'best'.*'herding'"):
        select_exemplars(targets, 2, "best")
    with pytest.raises(ValueError, match="'entropy' needs the samples' logits"):
        select_exemplars(targets, 2, "entropy")
    with pytest.raises(ValueError, match="'herding' needs the samples' features"):
        select_exemplars(targets, 2, "herding")
    assert set(SELECTIONS) == {"random", "herding", "entropy", "confidence", "logit_distance"}


# ------------------------------------------------------------------ report aggregation
def _record(method: str, seed: int, metrics: dict, **extra) -> dict:
    return {"method": method, "seed": seed, "exact": method == "pall", "metrics": metrics,
            "config": {"benchmark": "digits", "n_tasks": 5, "epochs": 3, "model": "mlp",
                       "train_per_task": None, "n_unlearn": 3},
            "timings": {"learn_seconds_per_epoch": 1.0 + seed, "unlearn_seconds": None,
                        "per_request": [{"kind": "learn", "seconds_per_epoch": 2.0},
                                        {"kind": "unlearn", "seconds": 0.5}]},
            "model_size_mb": 0.1 * (seed + 1),
            "device": {"type": "cpu", "name": "Test CPU", "threads": 1},
            "versions": {"torch": "x"}, **extra}


M1 = {"A_l": 90.0, "A_u": 50.0, "F_l": 0.0, "F_u": 1.0, "F_u_max": 3.0}
M2 = {"A_l": 80.0, "A_u": 40.0, "F_l": 0.0, "F_u": 2.0, "F_u_max": 5.0}


def test_summary_frame_hand_computed():
    stats = [{"retrained": 10, "retrained_fraction": 0.1, "retrained_mean_abs_change": 0.2},
             {"retrained": 30, "retrained_fraction": 0.3, "retrained_mean_abs_change": None}]
    records = [_record("pall", 0, M1, unlearning_stats=stats),
               _record("pall", 1, M2, unlearning_stats=stats[:1]),
               _record("sequential", 0, M1)]
    frame = report.summary_frame(records, ("method",), extra={"twice": lambda r: 2 * r["seed"]})
    pall = frame.set_index("method").loc["pall"]
    assert pall["seeds"] == 2 and pall["A_l_mean"] == 85.0
    assert pall["A_l_std"] == pytest.approx(7.0710678)
    assert pall["A_l_min"] == 80.0 and pall["F_u_max_mean"] == 4.0     # F_u^max 3 and 5
    assert pall["retrained_mean"] == pytest.approx(50 / 3)          # 10, 30, 10
    assert pall["retrained_mean_abs_change_mean"] == pytest.approx(0.2)
    assert pall["learn_seconds_per_epoch_mean"] == 1.5 and pall["model_size_mb"] == 0.2
    assert pall["twice_mean"] == 1.0
    seq = frame.set_index("method").loc["sequential"]
    assert seq["A_l_std"] is None or pd.isna(seq["A_l_std"])
    assert seq["retrained_mean"] is None or pd.isna(seq["retrained_mean"])


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

    records = [_record(method, seed, compute_metrics(acc, seq(text, 3)), accuracy=acc,
                       requests=text.split())
               for method, runs in WORST_CASE_RUNS.items()
               for seed, (text, acc) in enumerate(runs)]
    _, cells = worst_case_table(records)
    assert list(cells.columns) == ["Method", "A_l^min ↑", "F_u^max ↓ (mean over seeds)",
                                   "Seeds"]
    expected = []
    for method, runs in WORST_CASE_RUNS.items():
        a_l, f_u_max = zip(*(_worst_case_by_hand(text, acc) for text, acc in runs), strict=True)
        expected.append([method_label(method), f"{min(a_l):.2f}", _cell(list(f_u_max)),
                         str(len(runs))])
    assert cells.values.tolist() == expected
    # PALL: A_l 78.5 and 75; F_u^max 3 and 7: their mean, not the worst seed's 7
    assert expected[1] == ["PALL", "75.00", "5.00 ± 2.83", "2"]
    assert expected[0][1:3] == ["72.00", "1.00 ± 1.00"]     # F_u^max 0, 1, 2


def test_format_wide_markdown_latex_and_write(tmp_path):
    records = [_record("pall", 0, M1, point="N_u=1"), _record("pall", 1, M2, point="N_u=1"),
               _record("sequential", 0, M2, point="N_u=2")]
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


# Table 1 side by side: hand-made records of two benchmarks in two results folders.
# benchmark -> method -> [(alpha of the record's configuration, A_l per seed)], model sizes
SIDE_BY_SIDE = {
    "cifar10": ({"sequential": [(0.2, [80.0, 84.0])], "wsn": [(0.2, [90.0])],
                 "pall": [(0.05, [91.0]), (0.1, [92.0]), (0.2, [93.0, 96.0])],
                 "independent": [(0.2, [97.0])]},
                {"d": 42.59, "d + M_i": 49.24, "d × |Ω_i|": 212.95}),
    "cifar100": ({"sequential": [(0.1, [60.0])], "wsn": [(0.1, [65.0])],
                  "pall": [(0.1, [70.0, 71.0]), (0.2, [72.0])],
                  "independent": [(0.1, [75.0])]},
                 {"d": 81.29, "d + M_i": 106.70, "d × |Ω_i|": 812.94}),
}
SYMBOLS = {"sequential": "d", "wsn": "d + M_i", "pall": "d + M_i", "independent": "d × |Ω_i|"}


def _side_by_side_metrics(a_l: float, seed: int) -> dict:
    return {"A_l": a_l, "A_u": a_l - 40, "F_l": 0.5 * seed, "F_u": a_l / 100, "F_u_max": 2.0}


def _write_side_by_side(root: Path) -> list[Path]:
    folders = []
    for benchmark, (methods, sizes) in SIDE_BY_SIDE.items():
        folder = root / f"results_{benchmark}"
        for method, runs in methods.items():
            for alpha, a_ls in runs:
                for seed, a_l in enumerate(a_ls):
                    record = _record(method, seed, _side_by_side_metrics(a_l, seed),
                                     benchmark=benchmark, requests=[], accuracy=[],
                                     exact=method in ("pall", "independent"),
                                     model_size_mb=sizes[SYMBOLS[method]])
                    record["config"] = {**record["config"], "benchmark": benchmark,
                                        "alpha": alpha}
                    record["split"] = {"classes_per_task": 2 if benchmark == "cifar10" else 10}
                    path = folder / benchmark / method / f"a{alpha}" / f"seed{seed}.json"
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(json.dumps(record))
        folders.append(folder)
    return folders


def _cell(values: list[float], exact: bool = False) -> str:
    cell = (f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}" if len(values) > 1
            else f"{values[0]:.2f}")
    return f"*Exact* ({cell})" if exact else cell


@pytest.mark.parametrize("method", BUILT_IN_METHODS)
def test_a_methods_size_symbol_says_how_its_measured_size_grows(method):
    # Table 1's symbol is checked against what the strategy measures with 1 and 5 active
    # tasks: d stays put, d + M_i adds mask bits per task, d × |Ω_i| adds a model per task
    strategy, _, _ = make_strategy(method, measured=False)
    (floats_1, bits_1), (floats_5, bits_5) = (strategy.inference_size(n) for n in (1, 5))
    symbol = report.model_size_symbol(method)
    if symbol == "d":
        assert (floats_1, bits_1) == (floats_5, bits_5) and bits_1 == 0
    elif symbol == "d + M_i":
        assert floats_1 == floats_5 and bits_1 > 0 and bits_5 == 5 * bits_1
    else:
        assert symbol == "d × |Ω_i|" and floats_5 == 5 * floats_1 and bits_5 == bits_1 == 0


def test_table1_side_by_side_cells_hand_computed(tmp_path):
    folders = _write_side_by_side(tmp_path)
    markdown = report.main(["--table1", *map(str, folders), "--out", str(tmp_path / "t1")])
    assert markdown == (tmp_path / "t1.md").read_text()
    assert markdown.startswith("# Table 1 — cifar10, cifar100 side by side\n")
    lines = [line for line in markdown.splitlines() if line.startswith("| ")]
    header, *rows = [[c.strip().replace(r"\|", "|") for c in line.strip("|").split(" | ")]
                     for line in lines]
    assert r"| Independent | d × \|Ω_i\| |" in markdown       # "|" escaped in Markdown
    assert header == ["Method", "Model size",
                      *[f"{b} {c}" for b in SIDE_BY_SIDE
                        for c in ("A_l ↑", "A_u ↓", "F_l ↓", "F_u ↓")]]
    expected = []
    for method, alpha in [("sequential", None), ("wsn", None), ("pall", 0.05), ("pall", 0.1),
                          ("pall", 0.2), ("independent", None)]:
        label = {"sequential": "Sequential", "wsn": "WSN", "independent": "Independent",
                 "pall": f"PALL (α={alpha})"}[method]
        row = [label, SYMBOLS[method]]
        for methods, _ in SIDE_BY_SIDE.values():
            a_ls = [a_ls for a, a_ls in methods[method] if alpha in (None, a)]
            if not a_ls:
                row += ["—"] * 4
                continue
            metrics = [_side_by_side_metrics(a_l, seed) for seed, a_l in enumerate(a_ls[0])]
            row += [_cell([m[name] for m in metrics],
                          exact=name == "A_u" and method in ("pall", "independent"))
                    for name in ("A_l", "A_u", "F_l", "F_u")]
        expected.append(row)
    assert rows == expected
    assert rows[2][6:] == ["—"] * 4            # no PALL α=0.05 record on cifar100
    assert rows[4][2:4] == ["94.50 ± 2.12", "*Exact* (54.50 ± 2.12)"]     # 93, 96 by hand
    # The CSV: one row per benchmark and method, with the measured model size.
    csv = pd.read_csv(tmp_path / "t1.csv")
    assert list(zip(csv["benchmark"], csv["row"], csv["model_size_mb"], strict=True)) == [
        ("cifar10", "Sequential", 42.59), ("cifar100", "Sequential", 81.29),
        ("cifar10", "WSN", 49.24), ("cifar100", "WSN", 106.70),
        ("cifar10", "PALL (α=0.05)", 49.24),
        ("cifar10", "PALL (α=0.1)", 49.24), ("cifar100", "PALL (α=0.1)", 106.70),
        ("cifar10", "PALL (α=0.2)", 49.24), ("cifar100", "PALL (α=0.2)", 106.70),
        ("cifar10", "Independent", 212.95), ("cifar100", "Independent", 812.94)]
    assert csv["seeds"].tolist() == [2, 1, 1, 1, 1, 1, 2, 2, 1, 1, 1]
    assert ("cifar10: d = 42.59, d + M_i = 49.24, d × |Ω_i| = 212.95; cifar100: d = 81.29, "
            "d + M_i = 106.70, d × |Ω_i| = 812.94") in markdown
    latex = (tmp_path / "t1.tex").read_text()
    assert r"PALL ($\alpha$=0.05) & $d + M_i$ & 91.00" in latex
    assert r"Independent & $d \times |\Omega_i|$ & 97.00" in latex


def test_table1_figure_points_hand_computed(tmp_path):
    folders = _write_side_by_side(tmp_path)
    report.main(["--table1", *map(str, folders), "--out", str(tmp_path / "t1")])
    assert (tmp_path / "t1.png").stat().st_size > 1000
    records = [r for f in folders for r in report.load_records(f)]
    assert report.chance_by_benchmark(records) == {"cifar10": 50.0, "cifar100": 10.0}
    points = report.table1_points(report.table1_frame(records))
    assert list(points) == ["cifar10", "cifar100"]
    assert [p["row"] for p in points["cifar10"]] == [
        "Sequential", "WSN", "PALL (α=0.05)", "PALL (α=0.1)", "PALL (α=0.2)", "Independent"]
    pall = points["cifar10"][4]            # seeds with A_l 93 and 96, A_u = A_l − 40
    assert pall["exact"] is True and pall["A_l"] == 94.5 and pall["A_u"] == 54.5
    assert pall["A_l_std"] == pytest.approx(2.1213203) == pall["A_u_std"]
    sequential = points["cifar10"][0]
    assert sequential["exact"] is False and (sequential["A_l"], sequential["A_u"]) == (82.0, 42.0)
    assert points["cifar100"][0]["A_u_std"] == 0.0          # one seed: no spread drawn
    # what the figure draws: per benchmark panel, one point per row at (A_l, A_u) with its
    # spread, stars for the exact methods, chance dashed at 100 / classes per task
    fig = report.plot_table1(report.table1_frame(records), {"cifar10": 50.0, "cifar100": 10.0},
                             tmp_path / "again.png")
    for ax, (benchmark, chance) in zip(fig.axes, (("cifar10", 50.0), ("cifar100", 10.0)),
                                       strict=True):
        methods, _ = SIDE_BY_SIDE[benchmark]
        drawn = []
        for container in ax.containers:
            line, _, (xbar, ybar) = container.lines
            (x,), (y,) = line.get_xdata(), line.get_ydata()
            (xlo, _), (xhi, _) = xbar.get_segments()[0]
            (_, ylo), (_, yhi) = ybar.get_segments()[0]
            drawn.append((container.get_label(), line.get_marker(), x, y,
                          pytest.approx((xhi - xlo) / 2), pytest.approx((yhi - ylo) / 2)))
        expected = []
        for method, runs in methods.items():
            for alpha, a_ls in runs:              # A_u = A_l − 40 in every record
                label = f"PALL (α={alpha:g})" if method == "pall" else method_label(method)
                spread = statistics.stdev(a_ls) if len(a_ls) > 1 else 0.0
                expected.append((label, "*" if method in ("pall", "independent") else "o",
                                 statistics.mean(a_ls), statistics.mean(a_ls) - 40,
                                 spread, spread))
        assert drawn == expected                  # Table 1's order: SIDE_BY_SIDE's
        chance_line = ax.lines[-1]
        assert list(chance_line.get_ydata()) == [chance, chance]
        assert chance_line.get_linestyle() == "--"


# Fig. 3 / Table A6 by hand: (method, N_u) -> (A_l, F_u) per seed; N_u = 2 listed first.
VS_NU = {("pall", 2): [(97.0, 0.0), (95.0, 1.0)], ("derpp", 2): [(85.0, 4.0), (87.0, 6.0)],
         ("pall", 1): [(98.0, 0.5), (96.0, 1.5)], ("derpp", 1): [(90.0, 2.0)]}


def _errorbars(ax) -> dict[str, tuple]:
    """Label → (x, y, half-length of each vertical error bar, line style) of every line."""
    out = {}
    for container in ax.containers:
        line, _, (bars,) = container.lines
        out[container.get_label()] = (
            list(line.get_xdata()), list(line.get_ydata()),
            [pytest.approx((top - bottom) / 2) for (_, bottom), (_, top) in bars.get_segments()],
            line.get_linestyle())
    return out


def test_metrics_vs_nu_figure_draws_the_mean_and_std_over_seeds(tmp_path):
    records = []
    for (method, n_unlearn), runs in VS_NU.items():
        for seed, (a_l, f_u) in enumerate(runs):
            record = _record(method, seed, {**M1, "A_l": a_l, "F_u": f_u}, point=f"N_u={n_unlearn}")
            record["config"] = {**record["config"], "n_unlearn": n_unlearn}
            records.append(record)
    frame = report.summary_frame(records, ("point", "method", "n_unlearn"))   # as fig3.py
    fig = report.plot_metrics_vs(frame, "n_unlearn", ("A_l", "F_u"), tmp_path / "f.png",
                                 xlabel="N_u")
    assert (tmp_path / "f.png").stat().st_size > 1000
    for ax, (k, metric) in zip(fig.axes, enumerate(("A_l", "F_u")), strict=True):
        expected = {}
        for method, label, style in (("pall", "PALL", "-"), ("derpp", "DER++", "--")):
            values = [[run[k] for run in VS_NU[method, n]] for n in (1, 2)]
            expected[label] = ([1, 2], [statistics.mean(v) for v in values],
                               [statistics.stdev(v) if len(v) > 1 else 0.0 for v in values],
                               style)
        assert _errorbars(ax) == expected
        assert (ax.get_xlabel(), ax.get_ylabel()) == ("N_u", report.COLUMNS[metric])
        assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2"]
    assert _errorbars(fig.axes[0])["PALL"][1] == [97.0, 96.0]    # (98 + 96) / 2, (97 + 95) / 2
    assert _errorbars(fig.axes[1])["DER++"][1] == [2.0, 5.0]


def test_timing_figure_draws_each_methods_mean_seconds_per_learning_epoch(tmp_path):
    # seconds per epoch of each learning request per seed; an unlearning request after the
    # second learning request (its seconds are not drawn); means over the common length
    learning = {"sequential": [[1.0, 1.5, 2.0], [2.0, 2.5]], "pall": [[4.0, 5.0, 6.0],
                                                                        [6.0, 7.0, 9.0]]}
    records = []
    for method, runs in learning.items():
        for seed, seconds in enumerate(runs):
            per_request = [{"kind": "learn", "seconds_per_epoch": s} for s in seconds]
            per_request.insert(2, {"kind": "unlearn", "seconds": 100.0})
            record = _record(method, seed, M1)
            record["timings"] = {**record["timings"], "per_request": per_request}
            records.append(record)
    fig = report.plot_timing_vs_tasks(records, tmp_path / "t.png")
    (ax,) = fig.axes
    drawn = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata()),
                                line.get_linestyle()) for line in ax.lines}
    assert drawn == {"Sequential": ([1, 2], [1.5, 2.0], "--"),
                     "PALL": ([1, 2, 3], [5.0, 6.0, 7.5], "-")}


def test_heatmaps_draw_each_records_accuracy_matrix(tmp_path):
    requests = [{"kind": "learn", "task": 0}, {"kind": "learn", "task": 1},
                {"kind": "unlearn", "task": 0}]
    records = [_record("pall" if seed % 2 else "sequential", seed, M1, requests=requests,
                       accuracy=[[10.0 * seed, 1.0], [90.0, 80.0 - seed], [50.0, 70.0 + seed]],
                       point="N_u=1")
               for seed in range(7)]
    fig = report.plot_accuracy_heatmaps(records, tmp_path / "h.png", "title")
    panels = [ax for ax in fig.axes if ax.images]
    # 7 records: a grid of 2 rows of HEATMAP_COLUMNS = 6, the 5 unused cells hidden
    assert len(panels) == 7 and sum(not ax.get_visible() for ax in fig.axes) == 5
    for ax, record in zip(panels, records, strict=True):
        (image,) = ax.images
        assert image.get_array().tolist() == record["accuracy"]
        assert image.get_clim() == (0, 100)
        assert [t.get_text() for t in ax.get_yticklabels()] == ["L0", "L1", "U0"]
        assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "1"]
        label = "PALL" if record["seed"] % 2 else "Sequential"
        assert ax.get_title() == f"N_u=1 {label} s{record['seed']}"
    assert fig.texts[0].get_text() == "title"


def test_table1_side_by_side_refuses_mixed_configurations(tmp_path):
    folders = _write_side_by_side(tmp_path)
    other = _record("sequential", 5, M1, benchmark="cifar10", requests=[], accuracy=[])
    other["config"] = {**other["config"], "benchmark": "cifar10", "alpha": 0.2, "epochs": 1}
    (folders[0] / "seed5.json").write_text(json.dumps(other))
    with pytest.raises(ValueError, match=r"the sequential records of cifar10 come from 2 "
                                         r"configurations \(differing in \['epochs'\]\)"):
        report.main(["--table1", *map(str, folders), "--out", str(tmp_path / "t1")])
    assert not (tmp_path / "t1.md").exists()


def test_request_timings_checks_kinds():
    record = _record("pall", 0, M1)
    assert report.request_timings(record, 0, 1) == (2.0, 0.5)
    with pytest.raises(ValueError, match="request 1 is 'unlearn' and request 0 is 'learn'"):
        report.request_timings(record, 1, 0)


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
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_script_end_to_end(name, tmp_path, capsys):
    module = _script(name)
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
    module = _script("table_retrained")
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
    module = _script("table_scalability")
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


def test_report_module_cli(tmp_path):
    _script("table_nf").main([*TINY, "--nf", "0", "5", "--out", str(tmp_path / "res"),
                              "--report-dir", str(tmp_path)])
    markdown = report.main([str(tmp_path / "res"), "--out", str(tmp_path / "all")])
    assert "n_retrain_iters=0" in markdown and "n_retrain_iters=5" in markdown
    assert "Command: `python -m pall_avalanche.reports" in markdown
    assert (tmp_path / "all_heatmaps.png").is_file() and (tmp_path / "all.tex").is_file()


def test_bad_input_is_one_clear_error(tmp_path):
    with pytest.raises(ValueError, match=r"unknown selection\(s\) \['best'\]"):
        _script("table_buffer_selection").main([*TINY, "--selections", "best",
                                                "--out", str(tmp_path)])
    with pytest.raises(FileNotFoundError, match="does not exist"):
        report.main([str(tmp_path / "missing")])
    # A command-line value for a key the script sweeps would silently collapse the sweep.
    with pytest.raises(ValueError, match=r"the command line sets \['methods.pall.n_unlearn'\]"):
        _script("fig3").main([*TINY, "--n-unlearn-grid", "1", "2", "--set",
                              "methods.pall.n_unlearn=2", "--out", str(tmp_path)])
    assert not list(tmp_path.rglob("*.json"))


def test_a_title_names_the_epochs_each_method_really_ran():
    def record(method, epochs):
        return {"method": method, "config": {"epochs": epochs}}

    assert report.epochs_per_task([record("pall", 10), record("er", 10)]) == "10 epochs/task"
    assert report.epochs_per_task([record("pall", 10), record("sequential", 10),
                                   record("er", 5)]) == "10 epochs/task (ER: 5)"


def test_closing_summary_counts_runs_and_names_the_best():
    from pall_avalanche.runs.grid import closing_summary

    def record(method, point, a_l, a_u, exact):
        return {"method": method, "point": point, "exact": exact,
                "metrics": {"A_l": a_l, "A_u": a_u}, "split": {"classes_per_task": 2}}

    records = [record("sequential", "Table 1", 80.0, 90.0, False),
               record("pall", "α=0.1", 96.0, 40.0, True), record("pall", "α=0.1", 98.0, 60.0, True),
               record("pall", "α=0.2", 95.0, 52.0, True)]
    assert closing_summary({"ran": 3, "reused": 1}, records) == (
        "ran 3, reused 1 records; best A_l 97.00 (PALL (α=0.1)); exact methods' A_u 50.7 % on "
        "average vs chance 50.0 %")


def _checks(*failed: bool) -> list[dict]:
    """A record's learning_checks: one learning request per entry, failed or not."""
    return [{"index": i, "task": i, "balanced_accuracy": 50.0 if f else 95.0, "failed": f}
            for i, f in enumerate(failed)]


FLAGGED = [_record("pall", 0, M1, learning_checks=_checks(False, True)),
           _record("pall", 1, M2, learning_checks=_checks(False, False)),
           _record("sequential", 0, M2, learning_checks=_checks(False, False))]


def test_failed_learning_checks_are_marked_in_tables_csv_legend_and_summary(tmp_path):
    from pall_avalanche.runs.grid import closing_summary

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

    assert closing_summary({"ran": 3}, [record("er", 80.0, _checks(True)),
                                        record("er", 90.0, _checks(False)),
                                        record("gem", 70.0, None)]) == (
        "ran 3, reused 0 records; best A_l 85.00 (ER); 1 of 3 records left a task at chance "
        "right after learning it († in the table; see learning_checks)")


def test_failed_learning_checks_are_ringed_in_the_figures(tmp_path):
    """The Table 1 figure and the metric-vs-setting figure, read back from the drawn
    matplotlib figures: the flagged row's points ringed in red, †k/n in its legend label."""
    frame = report.table1_frame(FLAGGED)
    assert [(p["row"], p["failed"]) for p in report.table1_points(frame)["digits"]] == [
        ("Sequential", ""), ("PALL", "†1/2")]
    drawn = [report.plot_table1(frame, {"digits": 50.0}, tmp_path / "t1.png"),
             report.plot_metrics_vs(report.summary_frame(FLAGGED, ("method", "n_unlearn")),
                                    "n_unlearn", ("A_l",), tmp_path / "vs.png")]
    expected = [[(85.0, 45.0)], [(3.0, 85.0)]]          # PALL: (A_l, A_u); (N_u, A_l)
    for fig, points in zip(drawn, expected, strict=True):
        ax = fig.axes[0]
        rings = [line for line in ax.get_lines() if line.get_gid() == "†"]
        assert [tuple(map(float, xy)) for line in rings for xy in line.get_xydata()] == points
        assert all(line.get_markeredgecolor() == "red" for line in rings)
        labels = [text.get_text() for text in ax.get_legend().get_texts()]
        assert "PALL †1/2" in labels and "Sequential" in labels
