"""``perf_masking.py``: the device-hours estimate and the table by hand, the input pipelines'
measurement, and (slow) the table mode end to end on CPU."""

from __future__ import annotations

import pytest

from pall_avalanche.paper.gpu_hours import PAPER_A7, TableRuns, estimate_hours
from pall_avalanche.paper.gpu_table import COLUMNS
from pall_avalanche.paper.masking_cost import measure_pipeline
from pall_avalanche.paper.perf_masking import main
from pall_avalanche.paper.perf_report import table_lines

TIMING = {"epoch_seconds": {"sequential": 10.0, "wsn": 20.0, "pall": 30.0,
                            "pall (sort)": 40.0},
          "images_per_task": 100, "full_task": 10_000, "unlearn_seconds": 5.0,
          "n_retrain_iters": 50, "auto": "topk"}
CONFIG = {"epochs": 2, "seeds": [0, 1], "n_retrain_iters": 50, "buffer_size": 10,
          "methods": {"er_retrain": {"retrain_epochs": 3}}}


def test_device_hours_by_hand():
    table = TableRuns("X", "cifar10", {"pall": [(1, 3, None), (1, 1, 25)],
                                       "ewc": [(1, 3, None)], "er_retrain": [(1, 1, None)]})
    shared = TableRuns("Y", "cifar10", shares="X")
    rows = estimate_hours((table, shared, TableRuns("Z", "cifar100", {"pall": [(1, 1, None)]})),
                          {"cifar10": TIMING}, {"cifar10": CONFIG})
    images, seeds = 50_000, 2                       # S-CIFAR10's training set, two seeds
    pall = 30.0 / 100
    ewc = 10.0 / 100 * 6.42 / 3.23                  # Sequential's, by the paper's ratio
    er = 10.0 / 100 * 6.65 / 3.23
    seconds = seeds * ((2 * images * pall + 3 * 5.0)          # N_u = 3 at N_f = 50
                       + (2 * images * pall + 1 * 5.0 * 25 / 50)   # N_f = 25
                       + 2 * images * ewc                       # no unlearning cost (< 1e-4)
                       + (2 * images * er + 3 * 10 * er))       # 3 epochs over the buffer
    assert rows[0]["runs"] == 4 * seeds
    assert rows[0]["hours"] == pytest.approx(seconds / 3600, rel=1e-12)
    assert rows[1] == {"table": "Y", "benchmark": "cifar10", "runs": 0, "hours": None,
                       "note": "reuses X's records"}
    assert len(rows) == 2                            # cifar100 was not timed


def test_the_table_scales_to_the_full_task_and_sums_the_hours():
    columns = [COLUMNS["cifar10"]]
    lines = table_lines(columns, {"cifar10": TIMING}, {"cifar10": {"topk": 1.5, "sort": 3.25}},
                        {"cifar10": {**CONFIG, "buffer_size": 500, "seeds": list(range(20)),
                                     "epochs": 20}})
    text = "\n".join(lines)
    # 10 s for 100 images → 1,000 s for the task's 10,000; the paper's A40 figure beside it
    assert f"| sequential | 1e+03 s/epoch [{PAPER_A7['sequential']['cifar10'][0]}] |" in text
    assert "| pall (topk) | 3e+03 s/epoch [33.1] |" in text
    assert "| pall (sort) | 4e+03 s/epoch |" in text
    assert "| pall, one unlearning request (N_f = 50) | 5 s [1.09] |" in text
    assert "| sort | 3.25 ms |" in text
    hours = [line for line in lines if line.startswith("| Table")]
    total = sum(float(line.split("|")[4]) for line in hours if "reuses" not in line)
    last = next(line for line in lines if line.startswith("| **all**"))
    assert float(last.split("**")[3]) == pytest.approx(total, abs=0.15)


def test_both_input_pipelines_are_measured_on_the_same_task():
    rates = measure_pipeline(per_task=64, batch_size=32, repeats=1, threads=1,
                             device_name="cpu", seed=0)
    assert set(rates) == {"per_sample", "batched"} and min(rates.values()) > 0


@pytest.mark.slow
def test_the_table_mode_end_to_end_on_cpu(tmp_path):
    markdown = main(["--table", "--columns", "cifar10", "--table-images", "32",
                     "--retrain-iters", "1", "--repeats", "1", "--report-dir", str(tmp_path)])
    written = (tmp_path / "perf_masking_table_cpu.md").read_text()
    assert written == markdown and "a reduced run" in written
    for row in ("| sequential |", "| wsn (partition) |", "| pall (partition) |",
                "| pall (topk) |", "| pall (kthvalue) |", "| Table 1 | cifar10 | 260 |"):
        assert row in written
