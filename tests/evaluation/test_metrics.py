"""The paper's metrics against hand-computed values, including empty active sets."""

import numpy as np
import pytest

from pall_avalanche.evaluation.metrics import compute_metrics, model_size_mb, summarize_metrics
from pall_avalanche.requests import RequestSequence


def seq(text: str, n_tasks: int) -> RequestSequence:
    return RequestSequence.parse(text, n_tasks)


def test_metrics_by_hand():
    # L0 L1 U0 L2 over 3 tasks; rows = after each request.
    requests = seq("L0 L1 U0 L2", 3)
    acc = np.array([
        [90.0, 40.0, 55.0],
        [80.0, 70.0, 45.0],   # L1: Ω_0={0}: drop 90-80 = 10
        [50.0, 66.0, 45.0],   # U0: Ω={1}: drop 70-66 = 4
        [52.0, 60.0, 88.0],   # L2: Ω={1}: drop 66-60 = 6
    ])
    m = compute_metrics(acc, requests)
    assert m["A_l"] == pytest.approx((60 + 88) / 2)
    assert m["A_u"] == pytest.approx(52.0)
    assert m["F_l"] == pytest.approx((10 + 6) / 2)     # T-1 = 2 learning requests after the first
    assert m["F_u"] == pytest.approx(4.0)              # N_u = 1
    assert m["F_u_max"] == pytest.approx(4.0)


def test_unlearning_means_over_remaining_tasks_and_max_over_all():
    requests = seq("L0 L1 L2 U1", 3)
    acc = np.array([
        [90.0, 10.0, 10.0],
        [90.0, 80.0, 10.0],
        [90.0, 80.0, 70.0],
        [84.0, 50.0, 72.0],   # U1: Ω={0,2}: drops 6 and -2 → mean 2, max 6
    ])
    m = compute_metrics(acc, requests)
    assert m["F_u"] == pytest.approx(2.0)
    assert m["F_u_max"] == pytest.approx(6.0)
    assert m["F_l"] == pytest.approx(0.0)
    assert m["A_u"] == pytest.approx(50.0)
    assert m["A_l"] == pytest.approx(78.0)


def test_empty_active_sets_contribute_zero_with_fixed_denominators():
    # the edge case of docs/fidelity.md ("empty Ω"): Ω empties before a later learning request.
    requests = seq("L0 U0 L1 U1", 2)
    acc = np.array([
        [90.0, 50.0],
        [50.0, 50.0],   # U0: Ω_i empty → contributes 0
        [50.0, 95.0],   # L1: Ω_{i-1} empty → contributes 0
        [50.0, 48.0],   # U1: Ω_i empty → contributes 0
    ])
    m = compute_metrics(acc, requests)
    assert m["F_l"] == 0.0 and m["F_u"] == 0.0 and m["F_u_max"] == 0.0
    assert m["A_l"] is None                     # Ω_r empty: undefined, never 0
    assert m["A_u"] == pytest.approx(49.0)


def test_undefined_metrics_without_unlearning_or_second_task():
    m = compute_metrics([[70.0, 50.0]], seq("L0", 2))
    assert m == {"A_l": 70.0, "A_u": None, "F_l": None, "F_u": None, "F_u_max": None}


def test_shape_mismatch_is_rejected():
    with pytest.raises(ValueError, match=r"shape \(1, 3\); expected .* \(2, 3\)"):
        compute_metrics([[1.0, 2.0, 3.0]], seq("L0 L1", 3))


def test_summary_across_seeds():
    runs = [
        {"A_l": 90.0, "A_u": 50.0, "F_l": 0.0, "F_u": 1.0, "F_u_max": 3.0},
        {"A_l": 80.0, "A_u": 52.0, "F_l": 0.0, "F_u": 2.0, "F_u_max": 5.0},
        {"A_l": None, "A_u": 48.0, "F_l": 0.0, "F_u": 0.0, "F_u_max": 0.0},
    ]
    s = summarize_metrics(runs)
    assert s["n_runs"] == 3
    assert s["A_l_mean"] == pytest.approx(85.0)
    assert s["A_l_std"] == pytest.approx(np.sqrt(50.0))   # sample std of (90, 80)
    assert s["A_l_min"] == 80.0
    assert s["F_u_max_mean"] == pytest.approx(8.0 / 3)    # Table A8's F_u^max: 3, 5, 0
    assert s["A_u_mean"] == pytest.approx(50.0)
    assert summarize_metrics(runs[:1])["A_l_std"] is None


@pytest.mark.parametrize("floats, bits, expected", [
    (11_164_352, 0, 42.59),                      # ResNet-18 dense
    (11_164_352, 5 * 11_164_352, 49.24),         # + 5 masks
    (5 * 11_164_352, 0, 212.95),                 # Independent, 5 tasks (paper: 5 × 42.59)
    (21_311_168, 10 * 21_311_168, 106.70),       # ResNet-34 + 10 masks
    (5_648_832, 20 * 5_395_392, 34.41),          # ViT-T/8, T=20, per-task tokens
])
def test_model_size_matches_the_paper(floats, bits, expected):
    assert model_size_mb(floats, bits) == pytest.approx(expected, abs=0.01)
