"""Aggregating records into tables (pall_avalanche.reports.aggregate) on hand-made records."""

from __future__ import annotations

import pandas as pd
import pytest
from report_data import (
    M1,
    M2,
    make_record,
)

from pall_avalanche import reports as report


def test_summary_frame_hand_computed():
    stats = [{"retrained": 10, "retrained_fraction": 0.1, "retrained_mean_abs_change": 0.2},
             {"retrained": 30, "retrained_fraction": 0.3, "retrained_mean_abs_change": None}]
    records = [make_record("pall", 0, M1, unlearning_stats=stats),
               make_record("pall", 1, M2, unlearning_stats=stats[:1]),
               make_record("sequential", 0, M1)]
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


def test_request_timings_checks_kinds():
    record = make_record("pall", 0, M1)
    assert report.request_timings(record, 0, 1) == (2.0, 0.5)
    with pytest.raises(ValueError, match="request 1 is 'unlearn' and request 0 is 'learn'"):
        report.request_timings(record, 1, 0)


def test_a_title_names_the_epochs_each_method_really_ran():
    def record(method, epochs):
        return {"method": method, "config": {"epochs": epochs}}

    assert report.epochs_per_task([record("pall", 10), record("er", 10)]) == "10 epochs/task"
    assert report.epochs_per_task([record("pall", 10), record("sequential", 10),
                                   record("er", 5)]) == "10 epochs/task (ER: 5)"
