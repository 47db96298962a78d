"""The audit's rows and verdicts from its two experiments' records: Eq. 1 (:func:`audit_rows`)
and the shadow runs (:func:`attack_rows`) joined per method, each method's adjusted p-values
(its own family, :func:`~pall_avalanche.audit.verdict.family_p_values`), whether its positive
control is detected (power, :mod:`~pall_avalanche.audit.plans`), the leaky variants' detected
leaks in effect units, and one verdict per method (:mod:`~pall_avalanche.audit.verdict`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pall_avalanche.audit.oracle import audit_rows
from pall_avalanche.audit.permutation import N_PERMUTATIONS
from pall_avalanche.audit.plans import plan_for
from pall_avalanche.audit.shadows import attack_rows
from pall_avalanche.audit.verdict import ALPHA, family_p_values, verdict
from pall_avalanche.catalog import AUDIT_LEAKS, METHOD_INFO, method_label

__all__ = ["FAMILY_SIZE", "AuditSummary", "summarise"]

#: The number of tests in every method's family (its two primary tests).
FAMILY_SIZE = 2


@dataclass
class AuditSummary:
    """The audit's rows (one per method, every figure plus ``verdict``, ``powered`` and the
    adjusted p-values ``<test>_p_adj``) and what the verdicts rest on."""

    rows: list[dict[str, Any]]
    #: Per method, whether its positive control is detected (None: the control was not run).
    powered: dict[str, bool | None] = field(default_factory=dict)
    #: Permutations per test and Eq. 1's seeds: what the smallest reachable p-values rest on.
    n_permutations: int = N_PERMUTATIONS
    n_seeds: int = 0

    @property
    def smallest_p(self) -> float:
        """The smallest adjusted p-value a primary test can reach: Holm's first step over
        the family, FAMILY_SIZE / (N + 1)."""
        return min(1.0, FAMILY_SIZE / (self.n_permutations + 1))

    @property
    def smallest_eq1_p(self) -> float:
        """The same for Eq. 1: its statistic is unchanged when every seed's pair is swapped
        (a linear fit of the labels), so its null holds at most 2^(n − 1) distinct values and
        its p-value is at least 2^(1 − n) for n seeds."""
        raw = max(1 / (self.n_permutations + 1), 2.0 ** (1 - self.n_seeds))
        return min(1.0, FAMILY_SIZE * raw)

    def leaks_detected(self) -> list[dict[str, Any]]:
        """The leaky variants' rows (the dose-response and the channels), largest gap first,
        each with ``detected`` (its primary leak test rejects in its own family)."""
        rows = [dict(r, detected=bool(_detected(r)))
                for r in self.rows if r["method"] in AUDIT_LEAKS and "leak_auc" in r]
        return sorted(rows, key=lambda r: -r["leak_auc"])


def _detected(row: Mapping[str, Any]) -> bool:
    """Whether the primary leak test of ``row``'s method rejects in its family (the row holds
    its adjusted p-values)."""
    return row.get(f"{plan_for(row['method']).leak_test}_p_adj", 1.0) < ALPHA


def summarise(runs: Mapping[str, Sequence[dict]], shadow_runs: Mapping[str, Sequence[dict]],
              methods: Sequence[str], *, n_permutations: int = N_PERMUTATIONS,
              done: Callable[[str], None] | None = None) -> AuditSummary:
    """Rows, power and verdicts (module docstring).

    :param runs: :func:`~pall_avalanche.audit.run_audit`'s records by role.
    :param shadow_runs: :func:`~pall_avalanche.audit.shadows.run_shadows`' records by role.
    :param methods: the methods, in row order (the positive controls their plans name among
        them, or those methods are "no power").
    :param done: called as each method's tests end, twice per method (``"<method>:
        attack"``, then ``"<method>: Eq. 1"``): the permutation tests take minutes.
    """
    def finished(what: str) -> Callable[[str], None] | None:
        return None if done is None else (lambda method: done(f"{method}: {what}"))

    attacks = attack_rows(shadow_runs, methods, n_permutations=n_permutations,
                          done=finished("attack"))
    rows = [{**row, **attacks[row["method"]]}
            for row in audit_rows(runs, methods, n_permutations=n_permutations,
                                  done=finished("Eq. 1"))]
    adjusted = family_p_values(rows)
    for row in rows:
        for (method, test), p in adjusted.items():
            if method == row["method"]:
                row[f"{test}_p_adj"] = p
    by_method = {row["method"]: row for row in rows}
    powered: dict[str, bool | None] = {}
    for method in methods:
        control = by_method.get(plan_for(method).control)
        powered[method] = (_detected(control) if control is not None and "leak_auc" in control
                           else None)
    summary = AuditSummary(rows, powered, n_permutations,
                           len({r["seed"] for r in runs["unlearned"]}))
    for row in rows:
        method = row["method"]
        row["powered"] = powered[method]
        measured = all(k in row for k in ("auc", "leak_auc"))
        row["verdict"] = (verdict(row, adjusted, exact=METHOD_INFO[method].exact,
                                  powered=powered[method],
                                  control=method_label(plan_for(method).control))
                          if measured else "not measured: its runs diverged")
    return summary
