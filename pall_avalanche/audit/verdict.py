"""One verdict line per method from the audit's evidence, and only what the evidence carries.

A verdict needs three things before it judges anything:

1. **t was learned.** A run whose audited task is at chance on its own training data right
   after learning it (its learning check) has nothing to unlearn and nothing to leak: the
   method is "not measurable: t not learned in k/n runs", never "no leak found".
2. **The attack is calibrated.** The attack on never-learned oracles (the control) must not
   find membership; if it does, nothing is judged.
3. **The attack has power here.** The positive control (PALL whose unlearning changes
   nothing) must be detected; else the report says the attack has no power in this setting.

Then, with every p-value Holm-adjusted over the audited methods × tests
(:func:`family_p_values`):

- **leaks D^t**: the IN/OUT attack beats its control (per example or task level);
- **leaves a signature, not of D^t**: it does not, but Eq. 1's distinguisher (all heads or t's
  head) or KLoM on t's examples tells unlearned from never-learned;
- **no leak found**: neither.

"No leak found" is bounded by the dose-response (:func:`detection_limit`): the smallest
leak of a known size (a fraction f of what t trained kept) the same tests detect, δ. For a method
registered ``exact=True``: "exact: NOT supported" when it leaks, else "no leak above δ" (for
D^t only when Eq. 1 sees a signature).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pall_avalanche.audit.permutation import holm

__all__ = ["ALPHA", "FAMILY_TESTS", "LEAKS", "LEAK_TESTS", "NO_LEAK", "SIGNATURE",
           "SIGNATURE_TESTS", "detection_limit", "family_p_values", "verdict"]

LEAKS = "leaks D^t"
SIGNATURE = "leaves a signature, not of D^t"
NO_LEAK = "no leak found"
#: Family-wise error rate of the audit's tests.
ALPHA = 0.05
#: The tests that find D^t in the model: the IN/OUT attack against its control.
LEAK_TESTS = ("leak_auc", "leak_inout_auc")
#: The tests that find the unlearning procedure: Eq. 1 (all heads, t's head) and KLoM's
#: worst decile on t's examples.
SIGNATURE_TESTS = ("auc", "auc_head", "klom_forget_q0.9")
#: The control's own tests (calibration).
CONTROL_TESTS = ("control_auc", "control_inout_auc")
#: Every test of an audited method, in the Holm family.
FAMILY_TESTS = (*LEAK_TESTS, *SIGNATURE_TESTS, *CONTROL_TESTS)


def family_p_values(rows: Sequence[Mapping[str, Any]], audited: Iterable[str]
                    ) -> dict[tuple[str, str], float]:
    """Adjusted p-values of every (method, test) of the report.

    The family is the audited methods × (:data:`LEAK_TESTS` + :data:`SIGNATURE_TESTS` +
    :data:`CONTROL_TESTS`): Holm's step-down adjustment. A calibration instrument (the
    positive control and the leaky variants, not in ``audited``) gets the Bonferroni bound
    min(1, m·p) with the family's size m (at least one method's tests): the bar of the
    family's strictest step, so a leak such an instrument shows detected would also be
    flagged in an audited method."""
    audited = set(audited)
    tests = FAMILY_TESTS
    raw = {(row["method"], test): row.get(f"{test}_p", float("nan"))
           for row in rows for test in tests}
    family = {key: p for key, p in raw.items() if key[0] in audited}
    adjusted = holm(family)
    m = max(sum(p == p for p in family.values()), len(tests))   # at least one method's tests
    for key, p in raw.items():
        if key[0] not in audited:
            adjusted[key] = min(1.0, m * p) if p == p else p
    return adjusted


def _significant(adjusted: Mapping[tuple[str, str], float], method: str,
                 tests: Iterable[str]) -> list[str]:
    return [t for t in tests if adjusted.get((method, t), 1.0) < ALPHA]


def detection_limit(doses: Sequence[tuple[float, str]],
                    adjusted: Mapping[tuple[str, str], float]) -> tuple[float, str] | None:
    """δ: the smallest dose f such that every leaky variant with a dose ≥ f is detected by a
    leak test, as (f, method); None when even the largest is not.

    :param doses: (dose, method) of the dose-response's variants.
    """
    smallest = None
    for dose, method in sorted(doses, reverse=True):
        if not _significant(adjusted, method, LEAK_TESTS):
            break
        smallest = (dose, method)
    return smallest


def verdict(row: Mapping[str, Any], adjusted: Mapping[tuple[str, str], float], *,
            exact: bool, powered: bool, delta: str | None) -> str:
    """The verdict of one method's audit row (module docstring).

    :param row: its figures: ``not_learned`` of ``seeds`` (Eq. 1's unlearned runs) and
        ``shadow_not_learned`` of ``shadow_runs``.
    :param adjusted: :func:`family_p_values`.
    :param exact: whether the method is registered ``exact=True``.
    :param powered: whether the positive control is detected in this setting.
    :param delta: the dose-response's δ in words ("25 % of what t trained kept"), None if no dose is
        detected.
    """
    method = row["method"]
    failed = row.get("not_learned", 0) + row.get("shadow_not_learned", 0)
    runs = row.get("seeds", 0) + row.get("shadow_runs", 0)
    if failed:
        return f"not measurable: t not learned in {failed}/{runs} runs"
    if _significant(adjusted, method, CONTROL_TESTS):
        return "attack not calibrated (its control on never-learned oracles finds members)"
    if not powered:
        return "no power: the positive control is not detected here; nothing judged"
    if _significant(adjusted, method, LEAK_TESTS):
        found = LEAKS
    elif _significant(adjusted, method, SIGNATURE_TESTS):
        found = SIGNATURE
    else:
        found = NO_LEAK
    if not exact:
        return found
    if found == LEAKS:
        return f"{found}; exact: NOT supported"
    bound = f"no leak above δ = {delta}" if delta else "no dose of leak is detected, δ unknown"
    return f"{found}; exact: {bound}" + (" (D^t only)" if found == SIGNATURE else "")
