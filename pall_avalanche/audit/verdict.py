"""One verdict line per method from the audit's evidence, and only what the evidence carries.

Every method is judged by its own plan (:mod:`~pall_avalanche.audit.plans`): one primary leak
test and one primary distinguishability test, Holm-corrected together (:func:`family_p_values`),
and a positive control of its kind of model. No test of another method enters its verdict,
so the verdict is the same whichever other methods one command audits. The method's other
tests are instruments, printed with their raw p-values: they never make a verdict, but one
rejecting stops an exact claim (below).

A verdict needs three things before it judges anything:

1. **t was learned.** A run whose audited task is at chance on its own training data right
   after learning it (its learning check) has nothing to unlearn and nothing to leak: the
   method is "not measurable: t not learned in k/n runs", never "no leak found".
2. **The attack is calibrated.** The attack on never-learned oracles (the control) must not
   find membership (its two tests, Holm-corrected); if it does, nothing is judged.
3. **The attack has power for this method.** Its positive control (its kind of model, keeping
   everything) must be detected by the control's own primary leak test; else "no power".

Then, from the two primary tests at family-wise :data:`ALPHA`:

- **leaks D^t (test)**: the leak test (the IN/OUT attack against its control) rejects;
- **distinguishable from never-learned (test)**: it does not, but the distinguishability
  test (Eq. 1) does: the unlearned model differs from one that never learned t, which no test
  attributes to D^t;
- **no leak found**: neither.

A method registered ``exact=True`` adds an equivalence claim in attack units: "exact within
ε" only when the leak statistic's simultaneous upper bound (one-sided, level 1 − α/2: both
primary tests' bounds hold together at 1 − α) is below the margin ε
(:data:`EQUIVALENCE_MARGIN`) and no instrument rejects at raw level :data:`ALPHA`; "exact
within ε not shown" when the bound is not below ε or an instrument rejects (named); "exact:
NOT supported (test)" when a primary test rejects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pall_avalanche.audit.permutation import holm
from pall_avalanche.audit.plans import TEST_NAMES, plan_for

__all__ = ["ALPHA", "CONTROL_TESTS", "DISTINGUISHABLE", "EQUIVALENCE_MARGIN", "LEAKS",
           "NO_LEAK", "SIMULTANEOUS_LEVEL", "family_p_values", "instruments", "rejected",
           "verdict"]

#: The verdict when the primary leak test rejects.
LEAKS = "leaks D^t"
#: The verdict when only the primary distinguishability test rejects.
DISTINGUISHABLE = "distinguishable from never-learned"
#: The verdict when neither primary test rejects.
NO_LEAK = "no leak found"
#: Family-wise error rate of a method's primary tests.
ALPHA = 0.05
#: The level of each primary test's bound, so that a method's two bounds hold together at
#: 1 − ALPHA (Bonferroni over its family of two).
SIMULTANEOUS_LEVEL = 1 - ALPHA / 2
#: ε, the largest per-example AUC gap to the control an "exact within ε" claim allows: half of
#: the gap of the smallest keep-everything model the committed audit measured (Sequential on
#: the dense MLP, +0.091), so that a method within ε is measurably closer to the oracle than a
#: model that unlearns nothing. Declared before the measurement it is compared with.
EQUIVALENCE_MARGIN = 0.05
#: The attack on never-learned oracles (calibration), per method.
CONTROL_TESTS = ("control_auc", "control_inout_auc")


def instruments(method: str) -> tuple[str, ...]:
    """``method``'s tests outside its family: printed with their raw p-values; they never
    make a verdict, but one rejecting stops an exact claim."""
    family = plan_for(method).family
    return tuple(t for t in TEST_NAMES if t not in family)


def family_p_values(rows: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], float]:
    """Adjusted p-values of every (method, test) of the report, each method on its own: its
    two primary tests Holm-corrected together, its two control tests likewise (calibration);
    an instrument keeps its raw p-value. No row's values depend on another row."""
    adjusted: dict[tuple[str, str], float] = {}
    for row in rows:
        method = row["method"]
        for tests in (plan_for(method).family, CONTROL_TESTS):
            found = holm({test: row.get(f"{test}_p", float("nan")) for test in tests})
            adjusted.update(((method, test), p) for test, p in found.items())
        adjusted.update(((method, test), row.get(f"{test}_p", float("nan")))
                        for test in instruments(method))
    return adjusted


def rejected(adjusted: Mapping[tuple[str, str], float], method: str, tests: Sequence[str]
             ) -> list[str]:
    """The ``tests`` of ``method`` whose adjusted p-value is below :data:`ALPHA`."""
    return [t for t in tests if adjusted.get((method, t), 1.0) < ALPHA]


def verdict(row: Mapping[str, Any], adjusted: Mapping[tuple[str, str], float], *,
            exact: bool, powered: bool | None, control: str = "the positive control",
            margin: float = EQUIVALENCE_MARGIN) -> str:
    """The verdict of one method's audit row (module docstring).

    :param row: its figures: ``not_learned`` of ``seeds`` (Eq. 1's unlearned runs),
        ``shadow_not_learned`` of ``shadow_runs``, and ``<leak test>_bound``, the leak
        statistic's simultaneous upper bound.
    :param adjusted: :func:`family_p_values`.
    :param exact: whether the method is registered ``exact=True``.
    :param powered: whether the method's positive control is detected in this setting (None:
        it was not run).
    :param control: the positive control's label (named when it is not detected).
    :param margin: ε of the equivalence claim, in the leak statistic's units.
    """
    method = row["method"]
    plan = plan_for(method)
    failed = row.get("not_learned", 0) + row.get("shadow_not_learned", 0)
    runs = row.get("seeds", 0) + row.get("shadow_runs", 0)
    if failed:
        return f"not measurable: t not learned in {failed}/{runs} runs"
    if rejected(adjusted, method, CONTROL_TESTS):
        return "attack not calibrated (its control on never-learned oracles finds members)"
    if powered is None:
        return f"no power shown: {control} was not run; nothing judged"
    if not powered:
        return (f"no power: {control} is not detected by its "
                f"{TEST_NAMES[plan_for(plan.control).leak_test]}; nothing judged")
    found = rejected(adjusted, method, plan.family)
    if plan.leak_test in found:
        line = f"{LEAKS} ({TEST_NAMES[plan.leak_test]})"
    elif found:
        line = f"{DISTINGUISHABLE} ({TEST_NAMES[plan.distinguish_test]})"
    else:
        line = NO_LEAK
    if not exact:
        return line
    if found:
        return f"{line}; exact: NOT supported ({' / '.join(TEST_NAMES[t] for t in found)})"
    against = [f"{TEST_NAMES[t]} rejects, raw p {adjusted[(method, t)]:.3g}"
               for t in instruments(method) if adjusted.get((method, t), 1.0) < ALPHA]
    if against:
        return f"{line}; exact within ε = {margin:g} not shown ({'; '.join(against)})"
    bound = row.get(f"{plan.leak_test}_bound", float("nan"))
    if bound == bound and bound < margin:
        return f"{line}; exact within ε = {margin:g} (gap ≤ {bound:+.3f})"
    shown = f"gap ≤ {bound:+.3f}" if bound == bound else "no bound"
    return f"{line}; exact within ε = {margin:g} not shown ({shown})"
