"""Relapse of unlearned tasks against hand-computed rises."""

import numpy as np
import pytest

from pall_avalanche.evaluation.metrics import relapse, relapse_summary
from pall_avalanche.requests import Request, RequestSequence


def reqs(text: str) -> list[Request]:
    return [Request.parse(token) for token in text.split()]


def test_relapse_stops_at_relearning_and_last_unlearning_is_undefined():
    # task 0 is learned again after its unlearning (not a valid RequestSequence, hence a list)
    requests = reqs("L0 L1 U0 L2 L0 U1")
    acc = np.array([
        [90.0, 10.0, 20.0],
        [85.0, 80.0, 15.0],
        [30.0, 78.0, 12.0],   # U0: task 0 at 30
        [45.0, 75.0, 70.0],   # 45 - 30 = 15
        [88.0, 74.0, 69.0],   # L0 again: not a relapse, the rows stop before it
        [86.0, 20.0, 68.0],   # U1 is the last request: no later row
    ])
    assert relapse(acc, requests) == [{"request": 2, "task": 0, "rise": pytest.approx(15.0)},
                                      {"request": 5, "task": 1, "rise": None}]
    assert relapse_summary(acc, requests) == (pytest.approx(15.0), pytest.approx(15.0))


def test_relapse_max_over_later_rows_and_clipped():
    requests = RequestSequence(reqs("L0 L1 U1 U0 L2"), 3)
    acc = [
        [80.0, 0.0, 5.0],
        [70.0, 60.0, 5.0],
        [72.0, 20.0, 5.0],    # U1: task 1 at 20; later 26, 18 → rise 6
        [25.0, 26.0, 5.0],    # U0: task 0 at 25; later 22 → -3 → 0
        [22.0, 18.0, 75.0],
    ]
    out = relapse(acc, requests)
    assert [(r["request"], r["task"]) for r in out] == [(2, 1), (3, 0)]
    assert out[0]["rise"] == pytest.approx(6.0)
    assert out[1]["rise"] == 0.0
    assert relapse_summary(acc, requests) == (pytest.approx(3.0), pytest.approx(6.0))


def test_relapse_without_unlearning_and_shape_check():
    requests = reqs("L0 L1")
    assert relapse([[50.0, 0.0], [40.0, 60.0]], requests) == []
    assert relapse_summary([[50.0, 0.0], [40.0, 60.0]], requests) == (None, None)
    with pytest.raises(ValueError):
        relapse([[50.0, 0.0]], requests)
