"""The audit's rows and verdicts from its two experiments' records: Eq. 1 (:func:`audit_rows`)
and the shadow runs (:func:`attack_rows`) joined per method, each method's adjusted p-values
(its own family, :func:`~pall_avalanche.audit.verdict.family_p_values`), whether its positive
control is detected (power, :mod:`~pall_avalanche.audit.plans`), the leaky variants' detected
leaks in effect units, and one verdict per method (:mod:`~pall_avalanche.audit.verdict`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from multiprocessing import get_context
from typing import Any

from pall_avalanche.audit.canaries import canary_rows
from pall_avalanche.audit.oracle import audit_rows
from pall_avalanche.audit.permutation import N_PERMUTATIONS
from pall_avalanche.audit.plans import plan_for
from pall_avalanche.audit.shadows import attack_rows, spread_gaps
from pall_avalanche.audit.swapped import swap_rows
from pall_avalanche.audit.verdict import ALPHA, family_p_values, verdict
from pall_avalanche.catalog import METHOD_INFO, method_label

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

    def leaks_detected(self) -> dict[str, list[dict[str, Any]]]:
        """Per kind of model, its leaky variants' rows (their plans' ``leaks``), largest gap
        first, each with ``detected`` (its primary leak test rejects in its own family)."""
        out: dict[str, list[dict[str, Any]]] = {}
        for row in self.rows:
            plan = plan_for(row["method"])
            if row["method"] in plan.leaks and "leak_auc" in row:
                out.setdefault(plan.kind, []).append(dict(row, detected=_detected(row)))
        return {kind: sorted(rows, key=lambda r: -r["leak_auc"]) for kind, rows in out.items()}


def _detected(row: Mapping[str, Any]) -> bool:
    """Whether the primary leak test of ``row``'s method rejects in its family (the row holds
    its adjusted p-values)."""
    return row.get(f"{plan_for(row['method']).leak_test}_p_adj", 1.0) < ALPHA


def replication_rows(replicated: Mapping[int, Mapping[str, Sequence[dict]]],
                     methods: Sequence[str], *, n_permutations: int, jobs: int = 1
                     ) -> dict[str, list[dict[str, Any]]]:
    """Per method, its per-example gap to its control in each replication of the shadow
    experiment (``replicated``: seed → :func:`~pall_avalanche.audit.shadows.run_shadows`'
    records by role; another class split, initialisation and so model per seed): ``seed``,
    ``leak_auc`` (at its worse time), ``leak_auc_p`` and ``detected`` — the leak test alone
    below ALPHA / FAMILY_SIZE, what rejecting in the method's family of two takes when the
    other test does not reject (Holm's first step; Eq. 1 does not run in a replication)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for seed, runs in sorted(replicated.items()):
        mine = [m for m in methods if any(r["method"] == m for r in runs["unlearned"])]
        for method, row in attack_rows(runs, mine, n_permutations=n_permutations,
                                       jobs=jobs).items():
            if "leak_auc" in row:
                out.setdefault(method, []).append({
                    "seed": seed, "leak_auc": row["leak_auc"], "leak_auc_p": row["leak_auc_p"],
                    "detected": row["leak_auc_p"] < ALPHA / FAMILY_SIZE})
    return out


def spread_rows(runs: Mapping[int, Mapping[str, Sequence[dict]]], methods: Sequence[str], *,
                n_permutations: int, jobs: int = 1) -> dict[str, dict[str, Any]]:
    """Per method with shadow runs at every seed of ``runs`` (seed → records by role: the
    audit's seed and its replications), the shadow experiment spread over those seeds at the
    cost of one seed's (:func:`~pall_avalanche.audit.shadows.spread_gaps`, its draws as
    ``jobs`` processes allow): ``spread_draws``, ``spread_runs`` (runs per draw),
    ``leak_auc_spread_mean`` / ``_min`` / ``_max``, ``spread_detected`` (draws whose leak
    test alone is below ALPHA / FAMILY_SIZE, as a replication's) and
    ``leak_auc_spread_by_draw``. A design measurement: never part of a verdict."""
    mine = [m for m in methods
            if all(any(r["method"] == m for r in roles["unlearned"]) for roles in runs.values())]
    if len(runs) < 2 or not mine:
        return {}
    # each method's own records (what a worker process receives)
    own = [{seed: {role: [r for r in records if r["method"] == m]
                   for role, records in roles.items()} for seed, roles in runs.items()}
           for m in mine]
    gaps = partial(spread_gaps, n_permutations=n_permutations)
    if jobs > 1:
        with ProcessPoolExecutor(min(jobs, len(mine)), mp_context=get_context("spawn")) as pool:
            found = dict(zip(mine, pool.map(gaps, own, mine), strict=True))
    else:
        found = dict(zip(mine, map(gaps, own, mine), strict=True))
    out = {}
    for method, draws in found.items():
        if not draws:
            continue
        values = [d["leak_auc"] for d in draws]
        out[method] = {
            "spread_draws": len(draws), "spread_runs": draws[0]["runs"],
            "leak_auc_spread_mean": float(sum(values) / len(values)),
            "leak_auc_spread_min": min(values), "leak_auc_spread_max": max(values),
            "spread_detected": sum(d["leak_auc_p"] < ALPHA / FAMILY_SIZE for d in draws),
            "leak_auc_spread_by_draw": "; ".join(f"{d['draw']}: {d['leak_auc']:+.3f}"
                                                 for d in draws)}
    return out


def _spread(replications: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A row's figures over its replications (the audit's own seed first): ``replications``,
    ``leak_auc_rep_mean`` / ``_min`` / ``_max``, ``detected_replications`` and
    ``leak_auc_by_seed`` (``"0: +0.165; 1: +0.150"``, for the CSV)."""
    gaps = [r["leak_auc"] for r in replications]
    return {"replications": len(gaps), "leak_auc_rep_mean": float(sum(gaps) / len(gaps)),
            "leak_auc_rep_min": min(gaps), "leak_auc_rep_max": max(gaps),
            "detected_replications": sum(bool(r["detected"]) for r in replications),
            "leak_auc_by_seed": "; ".join(f"{r['seed']}: {r['leak_auc']:+.3f}"
                                          for r in replications)}


def summarise(runs: Mapping[str, Sequence[dict]], shadow_runs: Mapping[str, Sequence[dict]],
              methods: Sequence[str], *, swapped: Sequence[dict] = (),
              canaries: Sequence[dict] = (),
              replicated: Mapping[int, Mapping[str, Sequence[dict]]] | None = None,
              replication_permutations: int = N_PERMUTATIONS,
              n_permutations: int = N_PERMUTATIONS,
              done: Callable[[str], None] | None = None, jobs: int = 1) -> AuditSummary:
    """Rows, power and verdicts (module docstring).

    :param runs: :func:`~pall_avalanche.audit.run_audit`'s records by role.
    :param shadow_runs: :func:`~pall_avalanche.audit.shadows.run_shadows`' records by role.
    :param swapped: :func:`~pall_avalanche.audit.swapped.run_swapped`'s records (the
        data-swap pairs, white-box; never part of a verdict).
    :param canaries: :func:`~pall_avalanche.audit.canaries.run_canaries`' records (the canary
        test, an instrument: :func:`~pall_avalanche.audit.canaries.canary_rows`).
    :param replicated: the leaky variants' and controls' shadow runs at further seeds
        (:func:`replication_rows`, with ``replication_permutations`` per test): the spread of
        their gaps over the replications, the audit's own seed included (:func:`_spread`'s
        keys in their rows), and the same runs drawn as a shadow experiment spread over the
        seeds at one seed's cost (:func:`spread_rows`' keys), never part of a verdict.
    :param methods: the methods, in row order (the positive controls their plans name among
        them, or those methods are "no power").
    :param done: called as each method's tests end, twice per method (``"<method>:
        attack"``, then ``"<method>: Eq. 1"``): the permutation tests take minutes.
    :param jobs: processes for the shadow runs' tests
        (:func:`~pall_avalanche.audit.shadows.attack_rows`); the rows are the same for every
        ``jobs``.
    """
    def finished(what: str) -> Callable[[str], None] | None:
        return None if done is None else (lambda method: done(f"{method}: {what}"))

    attacks = attack_rows(shadow_runs, methods, n_permutations=n_permutations,
                          done=finished("attack"), jobs=jobs)
    pairs = swap_rows(swapped, methods)
    tested = canary_rows(canaries, methods, n_permutations=n_permutations)
    again = replication_rows(replicated or {}, methods, n_permutations=replication_permutations,
                             jobs=jobs)
    spread = spread_rows({shadow_runs["unlearned"][0]["seed"]: shadow_runs, **(replicated or {})}
                         if replicated else {}, methods,
                         n_permutations=replication_permutations, jobs=jobs)
    rows = [{**row, **attacks[row["method"]], **pairs.get(row["method"], {}),
             **tested[row["method"]]}
            for row in audit_rows(runs, methods, n_permutations=n_permutations,
                                  done=finished("Eq. 1"))]
    adjusted = family_p_values(rows)
    for row in rows:
        for (method, test), p in adjusted.items():
            if method == row["method"]:
                row[f"{test}_p_adj"] = p
        if row["method"] in again and "leak_auc" in row:
            first = {"seed": shadow_runs["unlearned"][0]["seed"], "leak_auc": row["leak_auc"],
                     "detected": _detected(row)}
            row.update(_spread([first, *again[row["method"]]]))
        row.update(spread.get(row["method"], {}))
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
