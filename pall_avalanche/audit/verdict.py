"""One verdict line per method from the audit's evidence, separating what leaks from how the
unlearning procedure looks:

- **leaks D^t**: the IN-vs-OUT attack tells which half of D^t the model was trained on — the
  task-level IN/OUT AUC's interval lies above 0.5, or the per-example TPR at 1 % FPR's
  interval lies above 1 % (above the diagonal);
- **leaves a signature, not of D^t**: no such leak, but Eq. 1's distinguisher tells
  learned-then-unlearned from never-learned (its AUC interval over all heads lies above 0.5):
  the procedure is visible, the data is not;
- **no leak found**: neither, at the power of this audit (its intervals say how much).

A method registered ``exact=True`` gets whether the evidence supports the claim. An attack
whose control (the same attack on never-learned oracles) leaves the diagonal is not
calibrated, and the verdict says so instead of judging.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["LEAKS", "NO_LEAK", "SIGNATURE", "verdict"]

LEAKS = "leaks D^t"
SIGNATURE = "leaves a signature, not of D^t"
NO_LEAK = "no leak found"


def _above(row: Mapping[str, Any], name: str, null: float) -> bool:
    return row[f"{name}_low"] > null


def verdict(row: Mapping[str, Any], *, exact: bool) -> str:
    """The verdict of one method's audit row (module docstring).

    :param row: the row's attack figures ``attack_inout_auc``, ``attack_tpr@0.01``, the same
        of the control (``control_``) and Eq. 1's ``auc`` (all heads), each with ``_low`` /
        ``_high``.
    :param exact: whether the method is registered ``exact=True``.
    """
    if _above(row, "control_inout_auc", 0.5) or _above(row, "control_tpr@0.01", 0.01):
        return "attack not calibrated (its control on never-learned oracles leaks)"
    if _above(row, "attack_inout_auc", 0.5) or _above(row, "attack_tpr@0.01", 0.01):
        found = LEAKS
    elif _above(row, "auc", 0.5):
        found = SIGNATURE
    else:
        found = NO_LEAK
    if not exact:
        return found
    claim = {NO_LEAK: "exact: supported", SIGNATURE: "exact: supported for D^t, not Eq. 1",
             LEAKS: "exact: NOT supported"}[found]
    return f"{found}; {claim}"
