"""The reports' figures (pall_avalanche.reports.figures): what each draws, read back from the
axes, on hand-made records."""

from __future__ import annotations

import statistics

import pytest
from report_data import (
    FLAGGED,
    M1,
    SIDE_BY_SIDE,
    make_record,
    write_side_by_side,
)

from pall_avalanche import reports as report
from pall_avalanche.catalog import method_label


def test_table1_figure_points_hand_computed(tmp_path):
    folders = write_side_by_side(tmp_path)
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
    # spread (clipped at 0 and 100 %), each row a marker shape of its own, filled for the
    # exact methods, chance dashed at 100 / classes per task
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
            drawn.append((container.get_label(), line.get_marker(),
                          line.get_markerfacecolor() != "none", x, y,
                          pytest.approx([x - xlo, xhi - x]), pytest.approx([y - ylo, yhi - y])))
        expected, filled, open_ = [], iter("*PDXph8H"), iter("os^v<>dH")
        for method, runs in methods.items():
            for alpha, a_ls in runs:              # A_u = A_l − 40 in every record
                label = f"PALL (α={alpha:g})" if method == "pall" else method_label(method)
                spread = statistics.stdev(a_ls) if len(a_ls) > 1 else 0.0
                a_l = statistics.mean(a_ls)
                exact = method in ("pall", "independent")
                expected.append((label, next(filled if exact else open_), exact, a_l, a_l - 40,
                                 [min(spread, a_l), min(spread, 100 - a_l)],
                                 [min(spread, a_l - 40), min(spread, 140 - a_l)]))
        assert drawn == expected                  # Table 1's order: SIDE_BY_SIDE's
        assert len({marker for _, marker, *_ in drawn}) == len(drawn)   # no two rows alike
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
            record = make_record(method, seed, {**M1, "A_l": a_l, "F_u": f_u},
                                 point=f"N_u={n_unlearn}")
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
            record = make_record(method, seed, M1)
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
    records = [make_record("pall" if seed % 2 else "sequential", seed, M1, requests=requests,
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


def test_the_w_b_heat_map_is_the_reports_drawing_with_its_values(tmp_path):
    """One drawing (pall_avalanche.heatmap): the W&B image writes each cell's value in it,
    white on the dark cells."""
    from matplotlib.figure import Figure

    from pall_avalanche.heatmap import draw_accuracy

    ax = Figure().add_subplot()
    image = draw_accuracy(ax, [[97.0, 0.0], [41.5, 99.0]], ["0 L0", "1 U0"], values=True)
    assert image.get_array().tolist() == [[97.0, 0.0], [41.5, 99.0]]
    assert [(t.get_text(), t.get_color()) for t in ax.texts] == [
        ("97", "black"), ("0", "white"), ("42", "white"), ("99", "black")]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["0 L0", "1 U0"]


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
    # Table 1's legend says what the ring means
    legend = drawn[0].axes[0].get_legend()
    (ring,) = [handle for handle, text in zip(legend.legend_handles, legend.get_texts(),
                                              strict=True) if text.get_text().startswith("†")]
    assert ring.get_markeredgecolor() == "red" and ring.get_markerfacecolor() == "none"


def test_table1_error_bars_stop_at_0_and_100_percent(tmp_path):
    """A spread wider than the distance to 100 % (or to 0) is drawn up to it, not past it."""
    records = [make_record("sequential", seed, {**M1, "A_l": a_l, "A_u": a_u})
               for seed, (a_l, a_u) in enumerate([(100.0, 0.0), (94.0, 6.0)])]
    fig = report.plot_table1(report.table1_frame(records), {"digits": 50.0}, tmp_path / "t.png")
    (container,) = fig.axes[0].containers
    line, _, (xbar, ybar) = container.lines
    std = statistics.stdev([100.0, 94.0])                   # 4.24 > 100 − 97 = 3
    (xlo, _), (xhi, _) = xbar.get_segments()[0]
    (_, ylo), (_, yhi) = ybar.get_segments()[0]
    assert (xlo, xhi) == pytest.approx((97.0 - std, 100.0))
    assert (ylo, yhi) == pytest.approx((0.0, 3.0 + std))
