"""The audit's verdict line (pall_avalanche.audit.verdict) from hand-written rows and p-values:
no verdict without learning, calibration and power; Holm's family; the detection limit δ."""

from __future__ import annotations

import pytest

from pall_avalanche.audit.verdict import (
    LEAKS,
    NO_LEAK,
    SIGNATURE,
    detection_limit,
    family_p_values,
    verdict,
)

TESTS = ("leak_auc", "leak_inout_auc", "auc", "auc_head", "klom_forget_q0.9", "control_auc",
         "control_inout_auc")


def row(method="m", not_learned=0, shadow_not_learned=0, **p) -> dict:
    out = {"method": method, "seeds": 16, "shadow_runs": 64, "not_learned": not_learned,
           "shadow_not_learned": shadow_not_learned}
    out.update({f"{t}_p": p.get(t, 0.5) for t in TESTS})
    return out


def judge(r: dict, *, exact=True, powered=True, delta="25 % of what t trained kept") -> str:
    return verdict(r, family_p_values([r], [r["method"]]), exact=exact, powered=powered,
                   delta=delta)


@pytest.mark.parametrize(("p", "exact", "expected"), [
    ({}, False, NO_LEAK),
    ({}, True, f"{NO_LEAK}; exact: no leak above δ = 25 % of what t trained kept"),
    ({"auc": 0.001}, False, SIGNATURE),
    ({"klom_forget_q0.9": 0.001}, True,
     f"{SIGNATURE}; exact: no leak above δ = 25 % of what t trained kept (D^t only)"),
    ({"leak_inout_auc": 0.001, "auc": 0.001}, True, f"{LEAKS}; exact: NOT supported"),
    ({"leak_auc": 0.001}, False, LEAKS),
    # 7 tests in the family: 0.01 · 7 = 0.07 is not below 0.05 after Holm's correction
    ({"leak_auc": 0.01}, False, NO_LEAK),
])
def test_verdicts(p, exact, expected):
    assert judge(row(**p), exact=exact) == expected


def test_a_task_never_learned_is_never_no_leak_found():
    # nothing significant anywhere, the setting powered: still no verdict on leaking
    for counts in ({"not_learned": 3}, {"shadow_not_learned": 1}):
        r = row(**counts)
        failed = sum(counts.values())
        assert judge(r) == f"not measurable: t not learned in {failed}/80 runs"
        assert NO_LEAK not in judge(r, exact=False)


def test_without_power_or_calibration_nothing_is_judged():
    assert judge(row(), powered=False).startswith("no power: the positive control")
    assert judge(row(leak_auc=0.0001), powered=False).startswith("no power")
    assert judge(row(leak_auc=0.0001, control_auc=0.0001)).startswith("attack not calibrated")
    assert judge(row(), delta=None).endswith("exact: no dose of leak is detected, δ unknown")


def test_holm_over_the_audited_family_and_bonferroni_for_instruments():
    rows = [row("a", leak_auc=0.004), row("b", leak_auc=0.003), row("leaky", leak_auc=0.004)]
    adjusted = family_p_values(rows, ["a", "b"])
    # the family: 2 methods × 7 tests = 14; b's 0.003 is smallest: 14 · 0.003, then a's
    # 0.004 · 13 = 0.052; every 0.5 becomes min(1, ...) = 1
    assert adjusted[("b", "leak_auc")] == pytest.approx(0.042)
    assert adjusted[("a", "leak_auc")] == pytest.approx(0.052)
    assert adjusted[("a", "auc")] == 1.0
    # an instrument: Bonferroni with the family's size, 14 · 0.004
    assert adjusted[("leaky", "leak_auc")] == pytest.approx(0.056)


def test_detection_limit_is_the_smallest_dose_with_every_larger_one_detected():
    def adjusted(detected):
        return {(m, "leak_auc"): 0.001 if m in detected else 0.9 for m in "abcd"} | {
            (m, "leak_inout_auc"): 0.9 for m in "abcd"}

    doses = [(1.0, "a"), (0.5, "b"), (0.25, "c"), (0.1, "d")]
    assert detection_limit(doses, adjusted("abc")) == (0.25, "c")
    # d detected by chance, c not: the limit stays at the last unbroken dose
    assert detection_limit(doses, adjusted("abd")) == (0.5, "b")
    assert detection_limit(doses, adjusted("bcd")) is None
    # a leaky variant at a dose at or above δ is reported leaking
    r = row("b", leak_auc=0.0001)
    assert verdict(r, family_p_values([r], []), exact=False, powered=True, delta="x") == LEAKS


def test_the_smallest_reachable_p_values_say_what_a_setting_can_detect():
    from pall_avalanche.audit.summary import AuditSummary

    # 11 audited methods × 7 tests, 2,000 permutations: Holm's first step 77 / 2,001
    powered = AuditSummary([], True, None, 77, n_permutations=2000, n_seeds=32)
    assert powered.smallest_p == pytest.approx(77 / 2001)
    assert powered.smallest_eq1_p == pytest.approx(77 / 2001)     # 2^-31 is smaller
    # 6 seeds: a swap of every pair leaves Eq. 1 unchanged, so p ≥ 2^-5 and 77 · 2^-5 > 1
    quick = AuditSummary([], False, None, 77, n_permutations=2000, n_seeds=6)
    assert quick.smallest_eq1_p == 1.0 and quick.smallest_p < 0.05
    assert AuditSummary([], True, None, 7, n_permutations=2000,
                        n_seeds=10).smallest_eq1_p == pytest.approx(7 * 2 ** -9)
