"""How many device-hours every paper table would take, from the timings of
:func:`~pall_avalanche.paper.gpu_table.measure_column` (plain arithmetic on them; the tables'
grids come from their scripts).

A run of method m on a benchmark learns every training image ``epochs`` times (each task once,
whatever T is) and serves N_u unlearning requests, so it takes about

    epochs × training images × s_m + N_u × u_m

seconds, s_m the method's measured seconds per training image (one epoch over a task divided by
its images) and u_m its seconds per unlearning request. Sequential, WSN and PALL are measured;
every other method takes Sequential's s (PALL's u) times its ratio to it in the paper's own
Table A7 (same column), so the estimate inherits the paper's relative costs for the methods this
project has not timed. PALL's u scales with N_f (its retraining iterations; the request's
fixed part, the re-draw, scales with it too); ER (Retraining)'s unlearning retrains
``retrain_epochs`` epochs over the buffer. u is measured with one remaining task: a retraining
iteration replays ``batch_size`` samples split over the remaining tasks, one forward pass per
task, so on a GPU more remaining tasks mean more, smaller passes and the unlearning share is a
lower bound. Evaluation is not counted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pall_avalanche.catalog import TABLE1_ALPHAS, TABLE1_METHODS
from pall_avalanche.config import resolve_method_config
from pall_avalanche.paper.fig3 import METHODS as FIG3_METHODS
from pall_avalanche.paper.table_er_retrain import METHODS as ER_RETRAIN_METHODS
from pall_avalanche.paper.table_rehearsal import PAPER_BUFFERS
from pall_avalanche.paper.table_scalability import METHODS as SCALABILITY_METHODS
from pall_avalanche.paper.table_scalability import PAPER_GRID

__all__ = ["PAPER_A7", "PAPER_TABLES", "TableRuns", "estimate_hours", "per_image_seconds"]

#: The paper's Table A7 (NVIDIA A40): method → per column (cifar10, cifar100, tinyimagenet)
#: (seconds per learning epoch, seconds per unlearning request; 0.0 for "< 1e-4").
PAPER_A7: dict[str, dict[str, tuple[float, float]]] = {
    "sequential": {"cifar10": (3.23, 0.0), "cifar100": (2.91, 0.0), "tinyimagenet": (2.71, 0.0)},
    "ewc": {"cifar10": (6.42, 0.0), "cifar100": (5.59, 0.0), "tinyimagenet": (3.59, 0.0)},
    "lwf": {"cifar10": (4.87, 0.0), "cifar100": (4.23, 0.0), "tinyimagenet": (3.37, 0.0)},
    "lsf": {"cifar10": (9.02, 0.51), "cifar100": (8.21, 0.90), "tinyimagenet": (5.28, 1.84)},
    "gem": {"cifar10": (23.8, 0.93), "cifar100": (12.4, 1.64), "tinyimagenet": (3.19, 2.10)},
    "er": {"cifar10": (6.65, 0.94), "cifar100": (5.70, 1.73), "tinyimagenet": (2.95, 2.13)},
    "derpp": {"cifar10": (9.09, 1.38), "cifar100": (8.44, 2.44), "tinyimagenet": (3.11, 3.06)},
    "packnet": {"cifar10": (3.40, 0.0), "cifar100": (3.07, 0.0), "tinyimagenet": (2.65, 0.0)},
    "wsn": {"cifar10": (32.6, 0.0), "cifar100": (30.2, 0.0), "tinyimagenet": (2.96, 0.0)},
    "pall": {"cifar10": (33.1, 1.09), "cifar100": (30.8, 1.88), "tinyimagenet": (3.13, 2.59)},
    "independent": {"cifar10": (3.20, 0.0), "cifar100": (2.89, 0.0),
                    "tinyimagenet": (2.66, 0.0)},
}

#: Methods the paper does not time, costed as a timed one (learning, unlearning).
_LIKE = {"er_retrain": ("er", None), "static_sparse": ("wsn", None),
         "dynamic_sparse": ("wsn", None)}

#: Training images of each benchmark (every task once).
TRAIN_IMAGES = {"cifar10": 50_000, "cifar100": 50_000, "tinyimagenet": 100_000}


@dataclass(frozen=True)
class TableRuns:
    """The runs of one paper table on one benchmark, per seed: ``runs`` maps a method to a
    list of (number of runs, N_u, N_f or None for the configuration's) entries.
    ``shares`` names the table whose records it reuses (then it costs nothing extra)."""

    table: str
    benchmark: str
    runs: Mapping[str, list[tuple[int, int, int | None]]] = field(default_factory=dict)
    shares: str | None = None


def _table1(benchmark: str) -> TableRuns:
    runs = {m: [(1, 3, None)] for m in TABLE1_METHODS}
    runs["pall"] = [(len(TABLE1_ALPHAS), 3, None)]         # one run per α
    return TableRuns("Table 1", benchmark, runs)


#: Every paper table at the paper's scale, on the benchmarks its script's paper example uses
#: (Table A2 and A8 read Table 1's records).
PAPER_TABLES: tuple[TableRuns, ...] = (
    *(_table1(b) for b in ("cifar10", "cifar100", "tinyimagenet")),
    TableRuns("Table 2 (T=40, 100)", "tinyimagenet",
              {"static_sparse": [(2, 3, None)], "dynamic_sparse": [(2, 3, None)],
               "independent": [(2, 3, None)], "pall": [(6, 3, 10)]}),
    TableRuns("Table A1", "cifar10", {"pall": [(1, 3, n) for n in (0, 10, 25, 50, 100)]}),
    *(TableRuns("Table A2", b, shares="Table 1") for b in ("cifar10", "cifar100",
                                                           "tinyimagenet")),
    TableRuns("Table A3", "cifar10", {"pall": [(5, 3, None)]}),
    TableRuns("Table A4", "cifar10", {"sequential": [(1, 3, None)], "independent": [(1, 3, None)],
                                      "er": [(len(PAPER_BUFFERS), 3, None)],
                                      "derpp": [(len(PAPER_BUFFERS), 3, None)],
                                      "pall": [(3 * len(PAPER_BUFFERS), 3, None)]}),  # 3 β
    TableRuns("Table A5", "cifar10", {m: [(1, 3, None)] for m in ER_RETRAIN_METHODS}),
    TableRuns("Table A6 (T=100)", "tinyimagenet",
              {m: [(3 if m == "pall" else 1, n, None) for n in PAPER_GRID]    # PALL: 3 α
               for m in SCALABILITY_METHODS}),
    *(TableRuns("Table A7", b, {m: [(1, 1, None)] for m in TABLE1_METHODS})
      for b in ("cifar10", "cifar100", "tinyimagenet")),
    *(TableRuns("Table A8", b, shares="Table 1") for b in ("cifar10", "cifar100",
                                                           "tinyimagenet")),
    TableRuns("Fig. 3", "cifar100", {m: [(1, n, None) for n in (1, 3, 5, 7, 9)]
                                     for m in FIG3_METHODS}),
)


def per_image_seconds(benchmark: str, measured: Mapping[str, float], images: int
                      ) -> dict[str, float]:
    """Seconds per training image of every method of :data:`PAPER_A7` and :data:`_LIKE` on
    ``benchmark``: measured ones (``measured``: method → seconds per epoch of ``images``
    images), the others from Sequential's by the paper's ratio."""
    out = {m: seconds / images for m, seconds in measured.items()}
    base = out["sequential"] / PAPER_A7["sequential"][benchmark][0]
    for method, columns in PAPER_A7.items():
        out.setdefault(method, base * columns[benchmark][0])
    for method, (learn, _) in _LIKE.items():
        out.setdefault(method, out[learn])
    return out


def _unlearn_seconds(benchmark: str, method: str, timing: Mapping[str, Any], n_f: int | None,
                     config: Mapping, per_image: Mapping[str, float]) -> float:
    """Seconds of one unlearning request of ``method``: PALL's measured request scaled to
    N_f iterations (``n_f``, or the configuration's), other methods by the paper's ratio to
    PALL, ER (Retraining) its retraining epochs over the buffer."""
    if method == "er_retrain":          # retrain_epochs epochs over the remaining buffers
        er_retrain = resolve_method_config(config, "er_retrain")
        return er_retrain["retrain_epochs"] * er_retrain["buffer_size"] * per_image["er"]
    n_retrain_iters = resolve_method_config(config, "pall")["n_retrain_iters"]
    pall = timing["unlearn_seconds"] * ((n_retrain_iters if n_f is None else n_f)
                                        / max(1, timing["n_retrain_iters"]))
    name = _LIKE.get(method, (None, method))[1] or method
    if name == "pall":
        return pall
    paper = PAPER_A7.get(name, {}).get(benchmark, (0.0, 0.0))[1]
    return pall * paper / PAPER_A7["pall"][benchmark][1]


def estimate_hours(tables: tuple[TableRuns, ...], timings: Mapping[str, Mapping[str, Any]],
                   configs: Mapping[str, Mapping]) -> list[dict]:
    """Device-hours of every table whose benchmark was timed: one row per table and
    benchmark (``table``, ``benchmark``, ``runs`` (all seeds), ``hours``; ``None`` for a table
    that reuses another's records).

    :param timings: benchmark → :func:`~pall_avalanche.paper.gpu_table.measure_column`'s
        result.
    :param configs: benchmark → its configuration (epochs, seeds, N_f, buffer size).
    """
    rows = []
    for entry in tables:
        if entry.benchmark not in timings:
            continue
        if entry.shares is not None:
            rows.append({"table": entry.table, "benchmark": entry.benchmark, "runs": 0,
                         "hours": None, "note": f"reuses {entry.shares}'s records"})
            continue
        timing, config = timings[entry.benchmark], configs[entry.benchmark]
        epoch = {m: s for m, s in timing["epoch_seconds"].items() if "(" not in m}
        per_image = per_image_seconds(entry.benchmark, epoch, timing["images_per_task"])
        seeds = len(config["seeds"])
        seconds, runs = 0.0, 0
        for method, settings in entry.runs.items():
            for count, n_unlearn, n_f in settings:
                learn = config["epochs"] * TRAIN_IMAGES[entry.benchmark] * per_image[method]
                unlearn = n_unlearn * _unlearn_seconds(entry.benchmark, method, timing, n_f,
                                                       config, per_image)
                seconds += count * seeds * (learn + unlearn)
                runs += count * seeds
        rows.append({"table": entry.table, "benchmark": entry.benchmark, "runs": runs,
                     "hours": seconds / 3600, "note": ""})
    return rows
