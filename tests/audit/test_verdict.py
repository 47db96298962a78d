"""The audit's verdict line (pall_avalanche.audit.verdict) from hand-written rows."""

from __future__ import annotations

import pytest

from pall_avalanche.audit.verdict import LEAKS, NO_LEAK, SIGNATURE, verdict


def row(inout=(0.48, 0.52), tpr=(0.0, 0.02), eq1=(0.40, 0.60), control=(0.48, 0.52),
        control_tpr=(0.0, 0.02)) -> dict:
    out = {}
    for name, (low, high) in (("attack_inout_auc", inout), ("attack_tpr@0.01", tpr),
                              ("auc", eq1), ("control_inout_auc", control),
                              ("control_tpr@0.01", control_tpr)):
        out[f"{name}_low"], out[f"{name}_high"] = low, high
    return out


@pytest.mark.parametrize(("values", "exact", "expected"), [
    ({}, False, NO_LEAK),
    ({}, True, f"{NO_LEAK}; exact: supported"),
    ({"eq1": (0.80, 0.95)}, False, SIGNATURE),
    ({"eq1": (0.80, 0.95)}, True, f"{SIGNATURE}; exact: supported for D^t, not Eq. 1"),
    ({"inout": (0.53, 0.60)}, True, f"{LEAKS}; exact: NOT supported"),
    ({"tpr": (0.012, 0.05), "eq1": (0.8, 0.9)}, False, LEAKS),   # above the diagonal at 1 %
    ({"tpr": (0.01, 0.05)}, False, NO_LEAK),                      # touching it is not above
])
def test_verdicts(values, exact, expected):
    assert verdict(row(**values), exact=exact) == expected


def test_an_uncalibrated_attack_judges_nothing():
    assert verdict(row(inout=(0.6, 0.7), control=(0.55, 0.65)), exact=True).startswith(
        "attack not calibrated")
