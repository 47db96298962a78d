"""The canary test: many target examples at little cost, for TPR at a low FPR.

The shadow runs' attack (:mod:`~pall_avalanche.audit.shadows`) has D^t's examples as targets,
about twenty in the powered setting: too few negatives for a TPR at 0.1 % FPR. A canary run
(:func:`~pall_avalanche.data.tasks.with_canaries`) adds ``count`` canaries to t's training
set, each independently with probability 1/2: a training input of t with its entries in a
random order and a label drawn among t's classes. The run replays the audited sequence R (t
learned, then unlearned) and a :class:`~pall_avalanche.audit.probes.CanaryProbe` records the
model's logits on every canary, included or not, at the end and right after every
unlearning request a learning request follows (:func:`~pall_avalanche.audit.oracle.
probe_times`), as the shadow runs' are.

Each canary's score is the logit-scaled confidence of its label under t's head
(:func:`~pall_avalanche.audit.attacks.logit_confidence`); over the runs of a method (one per
seed, each its own class split, initialisation and canaries) the included canaries' scores
against the others' give an AUC and the TPR at 1 % and 0.1 % FPR (pooled over the runs).
Which canaries a run included is random and nothing else in the run depends on it but
through t's training, so after an exact unlearning the included and the left-out canaries
are exchangeable: the null permutes the inclusions within each run (the count a run
included, which its data order depends on, is kept), and the test is exact without oracle
runs (one-run auditing, Steinke, Nasr & Jagielski 2023, "Privacy auditing with one (1)
training run"). The statistic is the worse of the times, its null the worse under each
permutation (the same permutations at every time).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import rankdata

from pall_avalanche.audit.attacks import attack_summary, logit_confidence
from pall_avalanche.audit.oracle import oracle_sequence, probe_times
from pall_avalanche.audit.permutation import CHUNK, N_PERMUTATIONS, p_value, worst_over_times
from pall_avalanche.audit.probes import CanaryProbe
from pall_avalanche.audit.shadows import _targets, _times
from pall_avalanche.requests import RequestSequence
from pall_avalanche.runs.batch import run_specs
from pall_avalanche.runs.spec import RunSpec, plan
from pall_avalanche.runs.wandb_logging import default_group

__all__ = ["CANARY_FPRS", "canary_rows", "canary_specs", "canary_test", "run_canaries"]

#: The FPRs the canary test reads TPRs at.
CANARY_FPRS = (0.01, 0.001)


def canary_specs(methods: Sequence[str], seeds: Sequence[int], count: int, config: dict, *,
                 requests: RequestSequence) -> list[RunSpec]:
    """:func:`run_canaries`' runs: every method at every seed on R, ``count`` canaries in
    the audited task."""
    _, unlearned = oracle_sequence(requests)
    return plan(methods, seeds, config, requests=requests,
                overrides=[("canary_task", unlearned[0]), ("canaries", count)],
                modules=[CanaryProbe.__module__])


def run_canaries(methods: Sequence[str], seeds: Sequence[int], count: int,
                 config: Mapping[str, Any], out_dir: str | Path, *, requests: RequestSequence,
                 **options: Any) -> list[dict]:
    """Run (or reuse) the canary runs (:func:`canary_specs`) under ``out_dir/canaries``;
    ``options`` as :func:`~pall_avalanche.audit.shadows.run_shadows`' (checkpoints are off, a
    diverged run is left out)."""
    _, unlearned = oracle_sequence(requests)
    options = {k: v for k, v in options.items() if k != "checkpoints"}
    return run_specs(canary_specs(methods, seeds, count, dict(config), requests=requests),
                     out_dir=Path(out_dir) / "canaries", group=default_group(config),
                     checkpoints=False,
                     probe=partial(CanaryProbe, unlearned[0], probe_times(requests)["unlearned"]),
                     skip_diverged=True, **options)


def _scores(records: Sequence[Mapping[str, Any]], time: str) -> np.ndarray:
    """(runs, canaries): each canary's logit-scaled confidence of its label under t's head."""
    out = []
    for record in records:
        probe = record["probe"]
        out.append(logit_confidence(np.asarray(_targets(record, time)["logits"]),
                                    np.asarray(probe["targets"]["y"]), probe["task"],
                                    record["split"]["classes_per_task"]))
    return np.stack(out)


def _tpr_at_ranks(ranks: np.ndarray, labels: np.ndarray, fpr: float) -> np.ndarray:
    """Per row of 0/1 ``labels`` (permutations × scores), the TPR at ``fpr`` of the pooled
    scores whose ranks (ties averaged) are ``ranks``: the share of positives ranked above the
    (k + 1)-th highest negative, k = ⌊fpr · negatives⌋ (the rules "score ≥ c" with at most k
    negatives called positive; :func:`~pall_avalanche.audit.attacks.tpr_at_fpr`)."""
    n_neg = int((labels[0] == 0).sum())
    k = int(np.floor(fpr * n_neg + 1e-9))
    if k >= n_neg:
        return np.ones(len(labels))
    negative = np.where(labels == 0, ranks, -np.inf)
    threshold = -np.partition(-negative, k, axis=1)[:, k]
    return ((ranks > threshold[:, None]) & (labels == 1)).sum(axis=1) / (labels == 1).sum(axis=1)


def _null(scores: Mapping[str, np.ndarray], member: np.ndarray, n_permutations: int,
          seed: int) -> dict[str, dict[str, np.ndarray]]:
    """Per time, the pooled AUC and the TPR at each of :data:`CANARY_FPRS` under
    ``n_permutations`` permutations of the inclusions within each run (the same permutations
    at every time)."""
    rng = np.random.default_rng(seed)
    ranks = {time: rankdata(s.ravel()) for time, s in scores.items()}
    n_pos = int(member.sum())
    n_neg = member.size - n_pos
    out = {time: {"auc": [], **{f: [] for f in CANARY_FPRS}} for time in scores}
    for start in range(0, n_permutations, CHUNK):
        size = min(CHUNK, n_permutations - start)
        labels = np.concatenate([rng.permuted(np.broadcast_to(row, (size, len(row))), axis=1)
                                 for row in member], axis=1).astype(np.int8)
        for time, r in ranks.items():
            out[time]["auc"].append((labels @ r - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))
            for f in CANARY_FPRS:
                out[time][f].append(_tpr_at_ranks(r, labels, f))
    return {time: {key: np.concatenate(v) for key, v in found.items()}
            for time, found in out.items()}


def canary_test(records: Sequence[Mapping[str, Any]], *,
                n_permutations: int = N_PERMUTATIONS, seed: int = 0) -> dict[str, Any]:
    """The canary test over one method's canary runs (module docstring): ``canary_auc``
    (pooled over the runs) with ``_p``, ``_time`` and per time (as
    :func:`~pall_avalanche.audit.permutation.worst_over_times`), ``canary_tpr@<f>`` at each
    of :data:`CANARY_FPRS` with ``_p`` at the AUC's time, ``canary_runs``, ``canary_count``
    (canaries over all runs) and ``canary_negatives`` (those left out: the negatives a TPR
    at an FPR rests on).

    :param records: the method's canary runs (one per seed; every run's canaries are its
        own).
    :param n_permutations: permutations of the null.
    :param seed: the permutations' generator.
    """
    records = sorted(records, key=lambda r: r["seed"])
    count = len(records[0]["probe"]["targets"]["y"])
    member = np.zeros((len(records), count), dtype=bool)
    for i, record in enumerate(records):
        member[i, record["probe"]["members"]] = True
    scores = {time: _scores(records, time) for time in _times({"unlearned": records})}
    null = _null(scores, member, n_permutations, seed)
    found = {time: attack_summary(s, member, fprs=CANARY_FPRS) for time, s in scores.items()}
    out = worst_over_times("canary_auc", {time: (found[time]["auc"], null[time]["auc"])
                                          for time in scores})
    worst = out["canary_auc_time"]
    for f in CANARY_FPRS:
        value = found[worst][f"tpr@{f:g}"]
        out[f"canary_tpr@{f:g}"] = value
        out[f"canary_tpr@{f:g}_p"] = p_value(value, null[worst][f])
    out.update(canary_runs=len(records), canary_count=int(member.size),
               canary_negatives=int((~member).sum()))
    return out


def canary_rows(records: Sequence[Mapping[str, Any]], methods: Sequence[str], *,
                n_permutations: int = N_PERMUTATIONS) -> dict[str, dict[str, Any]]:
    """:func:`canary_test` per method with at least two canary runs (a method with fewer
    gets an empty row: its runs diverged or it had none)."""
    out = {}
    for method in methods:
        mine = [r for r in records if r["method"] == method]
        out[method] = (canary_test(mine, n_permutations=n_permutations) if len(mine) >= 2
                       else {})
    return out
