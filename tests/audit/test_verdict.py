"""The audit's verdict line (pall_avalanche.audit.verdict) from hand-written rows and p-values:
no verdict without learning, calibration and power; each method's own family of two primary
tests; the equivalence claim in attack units."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from pall_avalanche.audit.plans import (
    DENSE,
    PALL_SUBNETWORKS,
    PER_TASK_MODELS,
    SUBNETWORKS,
    instruments_needed,
    plan_for,
)
from pall_avalanche.audit.verdict import (
    DISTINGUISHABLE,
    LEAKS,
    NO_LEAK,
    family_p_values,
    verdict,
)

TESTS = ("leak_auc", "leak_inout_auc", "leak_max_example_auc", "auc", "auc_head", "auc_unpaired",
         "klom_forget_in_q0.9",
         "klom_forget_in_unpaired_q0.9", "canary_auc", "control_auc", "control_inout_auc")


def row(method="m", not_learned=0, shadow_not_learned=0, bound=0.03, **p) -> dict:
    out = {"method": method, "seeds": 16, "shadow_runs": 64, "not_learned": not_learned,
           "shadow_not_learned": shadow_not_learned, "leak_auc_bound": bound}
    out.update({f"{t}_p": p.get(t, 0.5) for t in TESTS})
    return out


def judge(r: dict, *, exact=True, powered=True) -> str:
    return verdict(r, family_p_values([r]), exact=exact, powered=powered,
                   control="Sequential")


@pytest.mark.parametrize(("r", "exact", "expected"), [
    (row(), False, NO_LEAK),
    (row(), True, f"{NO_LEAK}; exact within ε = 0.05 (gap ≤ +0.030)"),
    (row(bound=0.08), True, f"{NO_LEAK}; exact within ε = 0.05 not shown (gap ≤ +0.080)"),
    (row(auc=0.001), False, f"{DISTINGUISHABLE} (Eq. 1)"),
    (row(auc=0.001), True, f"{DISTINGUISHABLE} (Eq. 1); exact: NOT supported (Eq. 1)"),
    # an instrument never makes a verdict (KLoM, the task-level attack, Eq. 1 on t's head
    # and unpaired, the canary test), but one rejecting at raw 0.05 stops the exact claim
    (row(**{"klom_forget_in_q0.9": 1e-4, "leak_inout_auc": 1e-4, "auc_head": 1e-4,
            "auc_unpaired": 1e-4, "canary_auc": 1e-4}), False, NO_LEAK),
    (row(**{"klom_forget_in_q0.9": 1e-4, "auc_head": 0.049}), True,
     f"{NO_LEAK}; exact within ε = 0.05 not shown (Eq. 1 on t's head rejects, raw p 0.049; "
     "KLoM (IN runs) rejects, raw p 0.0001)"),
    (row(canary_auc=0.01), True,
     f"{NO_LEAK}; exact within ε = 0.05 not shown (canary test rejects, raw p 0.01)"),
    (row(canary_auc=0.05), True, f"{NO_LEAK}; exact within ε = 0.05 (gap ≤ +0.030)"),
    (row(leak_auc=0.001, auc=0.001), True,
     f"{LEAKS} (per-example attack); exact: NOT supported (per-example attack / Eq. 1)"),
    # Holm over the method's two primary tests: 0.03 · 2 = 0.06 is not below 0.05, 0.02 is
    (row(leak_auc=0.03), False, NO_LEAK),
    (row(leak_auc=0.02), False, f"{LEAKS} (per-example attack)"),
])
def test_verdicts(r, exact, expected):
    assert judge(r, exact=exact) == expected


def test_a_task_never_learned_is_never_no_leak_found():
    # nothing significant anywhere, the setting powered: still no verdict on leaking
    for counts in ({"not_learned": 3}, {"shadow_not_learned": 1}):
        r = row(**counts)
        failed = sum(counts.values())
        assert judge(r) == f"not measurable: t not learned in {failed}/80 runs"
        assert NO_LEAK not in judge(r, exact=False)


def test_without_power_or_calibration_nothing_is_judged():
    assert judge(row(), powered=False) == (
        "no power: Sequential is not detected by its per-example attack; nothing judged")
    assert judge(row(leak_auc=0.0001), powered=False).startswith("no power")
    assert judge(row(), powered=None) == "no power shown: Sequential was not run; nothing judged"
    assert judge(row(leak_auc=0.0001, control_auc=0.0001)).startswith("attack not calibrated")


def test_a_methods_verdict_does_not_depend_on_the_other_methods_of_the_command():
    rng = np.random.default_rng(0)
    others = [row(f"other{i}", **{t: float(rng.uniform(1e-4, 0.05)) for t in TESTS})
              for i in range(6)]
    mine = row("pall", leak_auc=0.02, auc=0.2)
    alone = family_p_values([mine])
    for k in range(len(others) + 1):
        together = family_p_values([*others[:k], mine, *others[k:]])
        assert {key: p for key, p in together.items() if key[0] == "pall"} == alone
        assert verdict(mine, together, exact=True, powered=True) == verdict(
            mine, alone, exact=True, powered=True)
    # Holm over pall's two primary tests by hand: 2 · 0.02, then max(0.04, 1 · 0.2)
    assert alone[("pall", "leak_auc")] == pytest.approx(0.04)
    assert alone[("pall", "auc")] == pytest.approx(0.2)
    assert alone[("pall", "klom_forget_in_q0.9")] == 0.5           # an instrument: its raw p


def test_exact_is_claimed_only_with_every_condition_met():
    """Over a grid of rows, "exact within ε" appears only when t was learned, the attack is
    calibrated and powered, neither primary test rejects after Holm, no instrument rejects
    at raw 0.05, and the bound is below ε; a method that unlearns nothing (its leak test
    rejects) is never reported exact."""
    grid = itertools.product((1e-4, 0.02, 0.04, 0.5), (1e-4, 0.5), (1e-4, 0.5),
                             (0.01, 0.049, 0.05, 0.2), (True, False, None), (0, 1),
                             (0.01, 0.5))
    for leak, auc, control, bound, powered, failed, canary in grid:
        r = row(leak_auc=leak, auc=auc, control_auc=control, bound=bound, not_learned=failed,
                canary_auc=canary)
        line = judge(r, powered=powered)
        rejects = 2 * min(leak, auc) < 0.05        # Holm's first step over the two
        expected = (not failed and 2 * control >= 0.05 and powered is True and not rejects
                    and bound < 0.05 and canary >= 0.05)
        assert ("exact within ε = 0.05 (" in line) == expected, (r, powered, line)
        if 2 * leak < 0.05 and not failed and powered and 2 * control >= 0.05:
            assert "exact: NOT supported" in line


def test_every_method_has_the_control_and_leaky_variants_of_its_kind_of_model():
    assert plan_for("pall") == plan_for("pall_leak_head") == PALL_SUBNETWORKS
    assert plan_for("wsn") == plan_for("hat") == SUBNETWORKS
    assert (PALL_SUBNETWORKS.kind, PALL_SUBNETWORKS.control) == (SUBNETWORKS.kind,
                                                                 SUBNETWORKS.control)
    assert plan_for("independent") == plan_for("clpu_derpp") == PER_TASK_MODELS
    assert plan_for("ewc") == plan_for("a_plugins_method") == DENSE
    assert [p.control for p in (SUBNETWORKS, PER_TASK_MODELS, DENSE)] == [
        "pall_no_unlearning", "independent_no_unlearning", "sequential"]
    assert SUBNETWORKS.leaks == () and "pall_leak_buffer" in PALL_SUBNETWORKS.leaks
    assert PER_TASK_MODELS.leaks == ("independent_leak_50", "independent_leak_25")
    assert DENSE.leaks == ("sequential_leak_50", "sequential_leak_25")
    # a control and a leaky variant judge themselves with their own kind's plan
    for plan in (PALL_SUBNETWORKS, PER_TASK_MODELS, DENSE):
        assert all(plan_for(m) == plan for m in (plan.control, *plan.leaks))
    # what a command runs beside its methods: each kind's control and variants, once
    assert instruments_needed(["pall", "wsn", "sequential"]) == [
        "pall_no_unlearning", *PALL_SUBNETWORKS.leaks, *DENSE.leaks]
    assert instruments_needed(["wsn"]) == ["pall_no_unlearning"]
