"""The audit's rows and verdicts from its two experiments' records: Eq. 1 (:func:`audit_rows`)
and the shadow runs (:func:`attack_rows`) joined per method, the family's adjusted p-values,
whether the positive control is detected (power), the dose-response's detection limit δ,
and one verdict per method (:mod:`~pall_avalanche.audit.verdict`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pall_avalanche.audit.oracle import audit_rows
from pall_avalanche.audit.permutation import N_PERMUTATIONS
from pall_avalanche.audit.shadows import attack_rows
from pall_avalanche.audit.verdict import (
    ALPHA,
    LEAK_TESTS,
    detection_limit,
    family_p_values,
    verdict,
)
from pall_avalanche.catalog import AUDIT_CONTROL, AUDIT_LEAKS, METHOD_INFO

__all__ = ["AuditSummary", "POWER_AUC", "POWER_AUC_LOW", "summarise"]

#: The positive control must reach this per-example AUC ...
POWER_AUC = 0.60
#: ... with its interval's lower bound above this, and beat its own control (a leak test).
POWER_AUC_LOW = 0.55


@dataclass
class AuditSummary:
    """The audit's rows (one per method, every figure plus ``verdict`` and the adjusted
    p-values ``<test>_p_adj``) and what the verdicts rest on."""

    rows: list[dict[str, Any]]
    #: Whether the positive control is detected (None: it was not run).
    powered: bool | None
    #: The dose-response's detection limit, (f, method), None if no dose is detected or none
    #: was run.
    delta: tuple[float, str] | None
    #: The number of tests in the Holm family.
    family_size: int
    #: The audited methods (the family), the others being calibration instruments.
    audited: list[str] = field(default_factory=list)
    #: Permutations per test and Eq. 1's seeds: what the smallest reachable p-values rest on.
    n_permutations: int = N_PERMUTATIONS
    n_seeds: int = 0

    @property
    def smallest_p(self) -> float:
        """The smallest adjusted p-value any test can reach: Holm's first step, m / (N + 1)."""
        return min(1.0, self.family_size / (self.n_permutations + 1))

    @property
    def smallest_eq1_p(self) -> float:
        """The same for Eq. 1: its statistic is unchanged when every seed's pair is swapped
        (a linear fit of the labels), so its null holds at most 2^(n − 1) distinct values and
        its p-value is at least 2^(1 − n) for n seeds."""
        raw = max(1 / (self.n_permutations + 1), 2.0 ** (1 - self.n_seeds))
        return min(1.0, self.family_size * raw)

    @property
    def delta_text(self) -> str | None:
        """δ in words, e.g. "25 % of what t trained kept"."""
        if self.delta is None:
            return None
        return f"{self.delta[0]:.0%} of what t trained kept".replace("%", " %")


def _dose(records: Sequence[Mapping[str, Any]]) -> float | None:
    """The dose of a leaky variant (the fraction of what t trained it keeps) from its
    records' configuration, else None."""
    config = records[0]["config"] if records else {}
    return float(config["leak_fraction"]) if config.get("leak") == "redraw" else None


def summarise(runs: Mapping[str, Sequence[dict]], shadow_runs: Mapping[str, Sequence[dict]],
              methods: Sequence[str], *, n_permutations: int = N_PERMUTATIONS,
              done: Callable[[str], None] | None = None) -> AuditSummary:
    """Rows, power, δ and verdicts (module docstring).

    :param runs: :func:`~pall_avalanche.audit.run_audit`'s records by role.
    :param shadow_runs: :func:`~pall_avalanche.audit.shadows.run_shadows`' records by role.
    :param methods: the methods, in row order; the positive control and the leaky variants
        among them are instruments, every other method is audited.
    :param done: called as each method's tests end, twice per method (``"<method>:
        attack"``, then ``"<method>: Eq. 1"``): the permutation tests take minutes.
    """
    instruments = {AUDIT_CONTROL, *AUDIT_LEAKS}
    audited = [m for m in methods if m not in instruments]

    def finished(what: str) -> Callable[[str], None] | None:
        return None if done is None else (lambda method: done(f"{method}: {what}"))

    attacks = attack_rows(shadow_runs, methods, n_permutations=n_permutations,
                          done=finished("attack"))
    rows = [{**row, **attacks[row["method"]]}
            for row in audit_rows(runs, methods, n_permutations=n_permutations,
                                  done=finished("Eq. 1"))]
    adjusted = family_p_values(rows, audited)
    family_size = sum(1 for (m, _), p in adjusted.items() if m in audited and p == p)
    for row in rows:
        for (method, test), p in adjusted.items():
            if method == row["method"]:
                row[f"{test}_p_adj"] = p
    by_method = {row["method"]: row for row in rows}
    control = by_method.get(AUDIT_CONTROL)
    powered = None
    if control is not None:
        powered = bool(
            any(adjusted.get((AUDIT_CONTROL, t), 1.0) < ALPHA for t in LEAK_TESTS)
            and control.get("attack_auc", 0.0) >= POWER_AUC
            and control.get("attack_auc_low", 0.0) > POWER_AUC_LOW)
    doses = [(dose, m) for m in methods if m in AUDIT_LEAKS and (dose := _dose(
        [r for r in runs["unlearned"] if r["method"] == m])) is not None]
    delta = detection_limit(doses, adjusted) if doses else None
    n_seeds = len({r["seed"] for r in runs["unlearned"]})
    summary = AuditSummary(rows, powered, delta, family_size, audited, n_permutations, n_seeds)
    for row in rows:
        measured = all(k in row for k in ("auc", "leak_auc"))
        row["verdict"] = (verdict(row, adjusted, exact=METHOD_INFO[row["method"]].exact,
                                  powered=bool(powered), delta=summary.delta_text)
                          if measured else "not measured: its runs diverged")
    return summary
