"""The oracle comparison (Eq. 1): the unlearned model of every seed against an oracle that
never learned the unlearned task and a reference oracle with other training randomness
(:func:`run_audit`), measured by :func:`audit_rows`."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from pall_avalanche.audit.attacks import relearning_gap
from pall_avalanche.audit.permutation import N_PERMUTATIONS, eq1_test, worst_over_times
from pall_avalanche.audit.probes import AuditProbe
from pall_avalanche.audit.protocol import REFERENCE_SEED_OFFSET
from pall_avalanche.audit.statistics import mean_js, membership_aucs, model_features
from pall_avalanche.audit.twins import run_sharing_twins
from pall_avalanche.evaluation.metrics import relapse_summary, t_interval
from pall_avalanche.requests import RequestKind, RequestSequence
from pall_avalanche.runs.batch import run_specs
from pall_avalanche.runs.spec import RunSpec, plan
from pall_avalanche.runs.wandb_logging import default_group

__all__ = ["END", "RELEARN_AT_STEP", "REFERENCE_SEED_OFFSET", "audit_rows", "audit_specs",
           "interval_cell", "not_learned", "oracle_rows", "oracle_sequence", "probe_times",
           "relearn_threshold", "run_audit", "time_after"]

#: The relearning attack compares accuracies after this many fine-tuning steps.
RELEARN_AT_STEP = 10

# The audited sequence AUDIT_REQUESTS (pall_avalanche.audit.protocol): task 1 is unlearned
# after tasks 2 and 3 were learned on top of it (the channels of docs/fidelity.md, "Where
# exact unlearning is weaker", are open), and task 4 is learned after the unlearning; the
# reference oracle of seed s trains with training seed s + REFERENCE_SEED_OFFSET.


def oracle_sequence(requests: RequestSequence) -> tuple[RequestSequence, list[int]]:
    """(R′, U): the sequence without every request of an unlearned task, and those tasks.

    :param requests: the audited sequence R; it must unlearn at least one task.
    """
    unlearned = [r.task for r in requests if r.is_unlearn]
    if not unlearned:
        raise ValueError(f"the sequence {[str(r) for r in requests]} unlearns no task; the "
                         "audit needs at least one unlearning request")
    return requests.without_tasks(unlearned), unlearned


# ------------------------------------------------------------------------ the audit
def audit_specs(methods: Sequence[str], seeds: Sequence[int], config: dict, *,
                requests: RequestSequence) -> dict[str, list[RunSpec]]:
    """The unlearned, oracle and reference-oracle runs of every method and seed, by role
    (:func:`run_audit`'s; all checked before any runs)."""
    if len(seeds) < 2:
        raise ValueError(f"the audit needs at least 2 seeds for its intervals, got {list(seeds)}")
    oracle, _ = oracle_sequence(requests)
    roles = {"unlearned": (requests, None), "oracle": (oracle, None),
             "reference": (oracle, REFERENCE_SEED_OFFSET)}
    return {role: plan(methods, seeds, config, requests=sequence, train_seed_offset=offset,
                       modules=[AuditProbe.__module__])
            for role, (sequence, offset) in roles.items()}


#: The label of the final model's time.
END = "end"


def time_after(request) -> str:
    """The label of the time right after ``request`` (``after U1``)."""
    return f"after {request}"


def probe_times(requests: RequestSequence) -> dict[str, dict[int, list[str]]]:
    """When the audit reads a run besides its end (the shadow runs' attack, Eq. 1), per role
    (request index → the labels of the times it stands for): right after every unlearning
    request of R from the attacked task's on (labelled ``after U1``), unless it is R's last
    request (the end is then that time), and, for the oracle runs, at the aligned request of
    R′ (its last request before that point).
    The model right after t's unlearning request is what a leak lasting only until the next
    learning request leaves; with no learning request after it, it is the end."""
    _, unlearned = oracle_sequence(requests)
    out: dict[str, dict[int, list[str]]] = {"unlearned": {}, "oracle": {}}
    kept, started = 0, False
    for index, request in enumerate(requests):
        kept += request.task not in unlearned
        started = started or (request.is_unlearn and request.task == unlearned[0])
        if started and request.is_unlearn and index < len(requests) - 1 and kept:
            for role, at in (("unlearned", index), ("oracle", kept - 1)):
                out[role].setdefault(at, []).append(time_after(request))
    return out


def run_audit(methods: Sequence[str], seeds: Sequence[int], config: dict, out_dir: str | Path,
              *, requests: RequestSequence, **options: Any) -> dict[str, list[dict]]:
    """Run (or reuse) the unlearned, oracle and reference-oracle records of every method and
    seed under ``out_dir/{unlearned,oracle,reference}``; return them by role.

    :param methods: registered method names.
    :param seeds: at least two seeds.
    :param config: a full configuration.
    :param requests: the audited sequence R (it must unlearn a task).
    :param options: ``device``, ``jobs``, ``wandb``, ``show_progress``, ``stats``,
        ``overall`` of :func:`~pall_avalanche.runs.batch.run_specs`; checkpoints are off (the
        probe's state is not checkpointed) and a diverged run is left out (with a warning),
        not fatal.

    A leaky variant's oracle and reference runs are PALL's
    (:func:`~pall_avalanche.audit.twins.run_sharing_twins`: R′ has no unlearning request,
    the only thing in which they differ).
    """
    specs = audit_specs(methods, seeds, config, requests=requests)
    _, unlearned = oracle_sequence(requests)
    out = Path(out_dir)
    options = {k: v for k, v in options.items() if k != "checkpoints"}
    times = probe_times(requests)
    records = {}
    for role in specs:
        run = partial(run_specs, out_dir=out / role, group=default_group(config),
                      checkpoints=False, skip_diverged=True,
                      probe=partial(AuditProbe, unlearned, relearn=role != "reference",
                                    at=times["unlearned" if role == "unlearned" else "oracle"]),
                      **options)
        records[role] = run(specs[role]) if role == "unlearned" else run_sharing_twins(
            specs[role], run)
    return records


def _by_method(records: Sequence[dict]) -> dict[str, dict[int, dict]]:
    out: dict[str, dict[int, dict]] = {}
    for r in records:
        out.setdefault(r["method"], {})[r["seed"]] = r
    return out


def not_learned(records: Iterable[Mapping[str, Any]]) -> int:
    """How many of the records left their first unlearned task at chance right after
    learning it (its learning check failed)."""
    count = 0
    for record in records:
        task = next(r["task"] for r in record["requests"] if r["kind"] == RequestKind.UNLEARN)
        count += any(c["failed"] for c in record["learning_checks"] if c["task"] == task)
    return count


def _provenance_cell(records: Sequence[dict], key: str) -> str:
    results = [r["probe"]["provenance"] for r in records]
    if any(res is None for res in results):
        return "n/a"
    checks = [c[key] for res in results for c in res]
    failed = checks.count(False)
    return "pass" if not failed else f"FAIL ({failed}/{len(checks)})"


def _relapse(records: Sequence[dict]) -> dict[str, float]:
    """Relapse over the seeds' unlearned records: the mean per-record rise (Student-t
    interval) and the worst rise of any record
    (:func:`~pall_avalanche.evaluation.metrics.relapse_summary`)."""
    means, worst = [], []
    for record in records:
        sequence = RequestSequence(record["requests"], len(record["accuracy"][0]))
        mean, high = relapse_summary(record["accuracy"], sequence)
        if mean is not None:
            means.append(mean)
            worst.append(high)
    if len(means) < 2:
        return {"relapse": float("nan"), "relapse_low": float("nan"),
                "relapse_high": float("nan"), "relapse_max": float("nan")}
    mean, low, high = t_interval(means)
    return {"relapse": mean, "relapse_low": low, "relapse_high": high,
            "relapse_max": float(max(worst))}


def oracle_rows(requests: RequestSequence | Sequence) -> list[tuple[int, int, list[int]]]:
    """Per unlearning request i of task t in ``requests`` (R): (t, the row of the oracle's
    accuracy matrix aligned with R's row i, the oracle rows aligned with R's later rows up
    to a relearning of t). The oracle sequence R′ is R without every request of an unlearned
    task (:func:`oracle_sequence`): its rows are R's rows of the requests it keeps, and a row
    of R is aligned with the row of the last kept request at or before it."""
    requests = list(requests)
    removed = {int(r.task) for r in requests if r.kind == RequestKind.UNLEARN}
    kept = [j for j, r in enumerate(requests) if int(r.task) not in removed]
    position = {j: k for k, j in enumerate(kept)}
    out = []
    for i, r in enumerate(requests):
        if r.kind != RequestKind.UNLEARN:
            continue
        task = int(r.task)
        aligned = [position[j] for j in kept if j <= i]
        later = []
        for j in range(i + 1, len(requests)):
            if requests[j].kind == RequestKind.LEARN and int(requests[j].task) == task:
                break
            if j in position:
                later.append(position[j])
        if aligned and later:
            out.append((task, aligned[-1], later))
    return out


def _reference_relapse(oracles: Sequence[dict], unlearned: dict) -> dict[str, float]:
    """Relapse's reference: the same statistic on the oracles' accuracy of each unlearned
    task t (never learned in R′) over the rows aligned with R's rows after t's unlearning
    (:func:`oracle_rows`), clipped below at 0; mean over seeds with a Student-t interval and
    the worst record (``relapse_oracle``, ``_low``, ``_high``, ``_max``): how far t's
    accuracy wanders with nothing to relapse to."""
    requests = RequestSequence(unlearned["requests"], len(unlearned["accuracy"][0]))
    rows = oracle_rows(requests)
    means, worst = [], []
    for record in oracles:
        acc = np.asarray(record["accuracy"], dtype=np.float64)
        rises = [max(0.0, float(acc[later, t].max() - acc[at, t])) for t, at, later in rows]
        if rises:
            means.append(float(np.mean(rises)))
            worst.append(max(rises))
    if len(means) < 2:
        return {}
    mean, low, high = t_interval(means)
    return {"relapse_oracle": mean, "relapse_oracle_low": low, "relapse_oracle_high": high,
            "relapse_oracle_max": float(max(worst))}


def _relearning(unlearned: Sequence[dict], oracles: Sequence[dict], tasks: Sequence[int],
                cpt: int) -> dict[str, float]:
    """The relearning attack's gaps, unlearned against oracle of the same seed, for every
    attack variant (``relearn_<variant>_{acc_gap,steps_gap}`` with intervals): accuracy after
    :data:`RELEARN_AT_STEP` steps, and steps to :func:`relearn_threshold`."""
    out: dict[str, float] = {}
    variants = unlearned[0]["probe"]["relearn"][str(tasks[0])]
    for variant in variants:
        gap = relearning_gap(
            [r["probe"]["relearn"][str(t)][variant] for r in unlearned for t in tasks],
            [r["probe"]["relearn"][str(t)][variant] for r in oracles for t in tasks],
            relearn_threshold(cpt), RELEARN_AT_STEP)
        out.update({f"relearn_{variant}_{k}": v for k, v in gap.items() if k != "n"})
    return out


def relearn_threshold(classes_per_task: int) -> float:
    """The relearning attack's accuracy threshold: halfway from chance to 100 %."""
    return (100 / classes_per_task + 100) / 2


def audit_rows(runs: Mapping[str, Sequence[dict]], methods: Sequence[str], *,
               n_permutations: int = N_PERMUTATIONS,
               done: Callable[[str], None] | None = None) -> list[dict]:
    """One row of measurements per method (see the module docstring), in ``methods`` order; a
    method left with fewer than 2 seeds of all three roles (its runs diverged) gets only
    ``method`` and ``seeds``.

    :param runs: :func:`run_audit`'s records by role.
    :param n_permutations: permutations of Eq. 1's test.
    :param done: called with each method's name once its row is computed (progress).
    """
    by_role = {role: _by_method(records) for role, records in runs.items()}
    rows = []
    for method in methods:
        rows.append(_audit_row(method, by_role, n_permutations))
        if done is not None:
            done(method)
    return rows


def _audit_row(method: str, by_role: Mapping[str, Mapping[int, dict]],
               n_permutations: int) -> dict[str, Any]:
    """:func:`audit_rows`' row of ``method`` (its records by role and seed)."""
    unl, ora, ref = (by_role[role].get(method, {})
                     for role in ("unlearned", "oracle", "reference"))
    seeds = sorted(set(unl) & set(ora) & set(ref))     # a diverged run leaves its seed out
    if len(seeds) < 2:          # too few seeds left for an interval: nothing measured
        return {"method": method, "seeds": len(seeds)}
    cpt = unl[seeds[0]]["split"]["classes_per_task"]
    tasks = [int(t) for t in unl[seeds[0]]["probe"]["outputs"]]
    row: dict[str, Any] = {"method": method, "seeds": len(seeds)}
    pairs = [(s, label, record) for s in seeds for label, record in ((1, unl[s]), (0, ora[s]))]
    # the times every run of both roles was read at: the end, and right after t's unlearning
    times = [END, *sorted(set.intersection(*(set(r["probe"].get("outputs_at", {}))
                                             for _, _, r in pairs)))]

    def outputs(record: Mapping[str, Any], time: str) -> Mapping[str, Any]:
        probe = record["probe"]
        return probe["outputs"] if time == END else probe["outputs_at"][time]

    # unpaired: the unlearned models of every other seed against the oracles of the others,
    # no two models sharing a seed (so neither a class split nor initial weights)
    apart = [(s, 1 - i % 2, (ora if i % 2 else unl)[s]) for i, s in enumerate(seeds)]
    for name, head_only, models in (("auc", False, pairs), ("auc_head", True, pairs),
                                    ("auc_unpaired", False, apart)):
        if models is apart and len(seeds) < 4:
            continue                    # fewer than two models a side: nothing unpaired
        found = {}
        for time in times:
            shown = [t for t in tasks if str(t) in outputs(unl[seeds[0]], time)]
            feats = [model_features(outputs(record, time)[str(t)], t, cpt, head_only)
                     for _, _, record in models for t in shown]
            labels = [label for _, label, _ in models for _ in shown]
            groups = [s for s, _, _ in models for _ in shown]
            found[time] = eq1_test(np.array(feats), np.array(labels), np.array(groups),
                                   n_permutations=n_permutations, paired=models is pairs)
        row.update(_worst_eq1(name, found))
    js_gap, mia_loss, mia_feat = [], [], []
    for s in seeds:
        outs = {role: d[s]["probe"]["outputs"] for role, d in
                (("u", unl), ("o", ora), ("r", ref))}
        js_gap.append(np.mean([mean_js(outs["u"][str(t)], outs["r"][str(t)], cpt)
                               - mean_js(outs["o"][str(t)], outs["r"][str(t)], cpt)
                               for t in tasks]))
        mia_u = np.mean([membership_aucs(outs["u"][str(t)], t, cpt) for t in tasks], axis=0)
        mia_o = np.mean([membership_aucs(outs["o"][str(t)], t, cpt) for t in tasks], axis=0)
        mia_loss.append(mia_u[0] - mia_o[0])
        mia_feat.append(mia_u[1] - mia_o[1])
    for name, values in (("js_gap", js_gap), ("mia_loss_gap", mia_loss),
                         ("mia_feature_gap", mia_feat)):
        row[name], row[f"{name}_low"], row[f"{name}_high"] = t_interval(values)
    records = [unl[s] for s in seeds]
    row["not_learned"] = not_learned(records)
    row["provenance"] = _provenance_cell(records, "direct_pass")
    row["provenance_strict"] = _provenance_cell(records, "strict_pass")
    row.update(_relapse(records))
    row.update(_reference_relapse([ora[s] for s in seeds], records[0]))
    row.update(_relearning(records, [ora[s] for s in seeds], tasks, cpt))
    a_l = [r["metrics"]["A_l"] for r in records if r["metrics"]["A_l"] is not None]
    row["A_l"], row["A_l_std"] = float(np.mean(a_l)), float(np.std(a_l, ddof=1))
    row["unlearn_seconds"] = float(np.mean([r["timings"]["unlearn_seconds"]
                                            for r in records]))
    return row


def _worst_eq1(name: str, found: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Eq. 1 over the times its models were read at (``found``: time →
    :func:`~pall_avalanche.audit.permutation.eq1_test`): ``<name>`` is the largest AUC (at
    ``<name>_time``), ``_p`` its max-statistic p-value (the largest AUC under each of the
    flips, the same at every time), ``_upper`` that time's one-sided 95 % bound, and per
    time ``<name>[<time>]`` with its own ``_p``."""
    out = worst_over_times(name, {time: (test["auc"], test["null"])
                                  for time, test in found.items()})
    out[f"{name}_upper"] = found[out[f"{name}_time"]]["upper"]
    return out


def interval_cell(row: Mapping[str, Any], name: str, digits: int = 3) -> str:
    """``"0.512 [0.40, 0.63]"``: a measurement with its interval."""
    return (f"{row[name]:.{digits}f} [{row[name + '_low']:.{digits}f}, "
            f"{row[name + '_high']:.{digits}f}]")
