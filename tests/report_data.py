"""Hand-made records shared by the report tests (tests/reports): metrics, Table 1 folders side by
side, learning checks."""

from __future__ import annotations

import json
import statistics
from pathlib import Path


# ------------------------------------------------------------------ report aggregation
def make_record(method: str, seed: int, metrics: dict, **extra) -> dict:
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


def side_by_side_metrics(a_l: float, seed: int) -> dict:
    return {"A_l": a_l, "A_u": a_l - 40, "F_l": 0.5 * seed, "F_u": a_l / 100, "F_u_max": 2.0}


def write_side_by_side(root: Path) -> list[Path]:
    folders = []
    for benchmark, (methods, sizes) in SIDE_BY_SIDE.items():
        folder = root / f"results_{benchmark}"
        for method, runs in methods.items():
            for alpha, a_ls in runs:
                for seed, a_l in enumerate(a_ls):
                    record = make_record(method, seed, side_by_side_metrics(a_l, seed),
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


def cell(values: list[float], exact: bool = False) -> str:
    cell = (f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}" if len(values) > 1
            else f"{values[0]:.2f}")
    return f"*Exact* ({cell})" if exact else cell


def checks(*failed: bool) -> list[dict]:
    """A record's learning_checks: one learning request per entry, failed or not."""
    return [{"index": i, "task": i, "balanced_accuracy": 50.0 if f else 95.0, "failed": f}
            for i, f in enumerate(failed)]


FLAGGED = [make_record("pall", 0, M1, learning_checks=checks(False, True)),
           make_record("pall", 1, M2, learning_checks=checks(False, False)),
           make_record("sequential", 0, M2, learning_checks=checks(False, False))]
