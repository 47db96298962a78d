"""The per-example membership attack (U-LiRA style): is anything of D^t left in the unlearned
model, example by example?

The audited task t's classes and data are fixed (one class split, the audit's shadow seed).
Shadow run i replays the audited sequence R with t trained on a class-balanced random half of
D^t (``shadow_seed = i``, :func:`~pall_avalanche.data.tasks.half_of_task`) and its own
training randomness, and unlearns t as usual; so every target example (all of D^t) is IN in
about half of the runs and OUT in the rest, and the unlearning procedure is the same either
way. A :class:`ShadowProbe` records the final model's logits on all of D^t.

Per target example and run, the statistic is the logit-scaled confidence of its label under
t's head and under the head of every task learned after t
(:func:`~pall_avalanche.audit.attacks.confidence_features`: the weaker channels of PALL run
through later tasks). Every run is attacked with Gaussians fitted on the other runs where the
example was IN and where it was OUT (leave-one-run-out,
:func:`~pall_avalanche.audit.attacks.lira_cross_scores`), and the likelihood ratios of all
runs and examples give the ROC (AUC, TPR at 1 % and 0.1 % FPR, intervals resampling runs and
examples).
At task level, each run's own IN examples against its OUT examples give one AUC per run
(their mean, with the same two-way bootstrap interval: the runs share their examples, so
they are not independent): 0.5 when the model says nothing about which half it saw.
An exact method sits on the diagonal. The same attack against oracle runs (R′: t never
learned, membership drawn the same way) is the control: it must sit on the diagonal too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from pall_avalanche.audit.attacks import attack_summary, confidence_features, lira_cross_scores
from pall_avalanche.audit.oracle import model_logits, oracle_sequence
from pall_avalanche.requests import RequestSequence
from pall_avalanche.runs.batch import run_specs
from pall_avalanche.runs.spec import plan
from pall_avalanche.runs.wandb_logging import default_group

__all__ = ["SHADOW_TRAIN_SEED_OFFSET", "ShadowProbe", "attack", "attack_rows", "run_shadows"]

#: Shadow run i trains with training seed ``seed + SHADOW_TRAIN_SEED_OFFSET + i`` (its own
#: records, apart from the oracle comparison's).
SHADOW_TRAIN_SEED_OFFSET = 200_000


class ShadowProbe:
    """Rides along a shadow run: :meth:`finish` returns the final model's logits (every head)
    on the whole training set of the halved task and which of its examples were trained on.

    :param task: the audited (halved) task.
    """

    def __init__(self, task: int) -> None:
        self.task = task
        self.plugins: list = []

    def finish(self, strategy, benchmark) -> dict[str, Any]:
        return {"task": self.task,
                "targets": model_logits(strategy, benchmark.audit_targets,
                                        benchmark.split.n_tasks),
                "members": list(benchmark.split.shadow["members"])}


def run_shadows(methods: Sequence[str], n_shadows: int, config: Mapping[str, Any],
                out_dir: str | Path, *, requests: RequestSequence, seed: int = 0,
                **options: Any) -> dict[str, list[dict]]:
    """Run (or reuse) ``n_shadows`` shadow runs of every method on R (``"unlearned"``) and on
    R′ (``"oracle"``, the control), under ``out_dir/shadows/{unlearned,oracle}``.

    :param methods: registered method names.
    :param n_shadows: runs per method and role (at least 4: every example needs IN and OUT
        runs to fit on besides the attacked one).
    :param config: a full configuration.
    :param requests: the audited sequence R; its first unlearned task is attacked.
    :param seed: the class split and initial weights every shadow run shares.
    :param options: ``device``, ``jobs``, ``wandb``, ``show_progress``, ``stats`` of
        :func:`~pall_avalanche.runs.batch.run_specs` (checkpoints are off: the probe's state
        is not checkpointed; a diverged run is left out with a warning).
    """
    if n_shadows < 4:
        raise ValueError(f"--shadows {n_shadows}: the attack needs at least 4 shadow runs per "
                         "method")
    oracle, unlearned = oracle_sequence(requests)
    task = unlearned[0]
    out = Path(out_dir) / "shadows"
    options = {k: v for k, v in options.items() if k != "checkpoints"}
    records = {}
    for role, sequence in (("unlearned", requests), ("oracle", oracle)):
        specs = [spec for i in range(n_shadows)
                 for spec in plan(methods, [seed], config, requests=sequence,
                                  overrides=[("shadow_task", task), ("shadow_seed", i)],
                                  train_seed_offset=SHADOW_TRAIN_SEED_OFFSET + i)]
        records[role] = run_specs(specs, out / role, group=default_group(config),
                                  checkpoints=False, probe=partial(ShadowProbe, task),
                                  skip_diverged=True, **options)
    return records


def _later_tasks(record: Mapping[str, Any], task: int) -> list[int]:
    """The tasks the record's sequence learns after ``task`` (whose heads the attack reads)."""
    order = [r["task"] for r in record["requests"] if r["kind"] == "learn"]
    return order[order.index(task) + 1:] if task in order else order


def attack(records: Sequence[Mapping[str, Any]]) -> dict[str, float | int]:
    """The per-example attack and the task-level IN/OUT AUC over one method's shadow runs of
    one role (module docstring): :func:`~pall_avalanche.audit.attacks.attack_summary`'s keys
    plus ``runs``."""
    first = records[0]
    task = first["probe"]["task"]
    cpt = first["split"]["classes_per_task"]
    heads = [task, *_later_tasks(first, task)]
    y = np.asarray(first["probe"]["targets"]["y"])
    features = np.stack([confidence_features(np.asarray(r["probe"]["targets"]["logits"]), y,
                                             heads, cpt) for r in records])
    member = np.zeros(features.shape[:2], dtype=bool)
    for i, record in enumerate(records):
        member[i, record["probe"]["members"]] = True
    scores = lira_cross_scores(features, member, n_folds=len(records))
    out = attack_summary(scores, member)
    out["runs"] = len(records)
    return out


def attack_rows(runs: Mapping[str, Sequence[dict]], methods: Sequence[str]
                ) -> dict[str, dict[str, Any]]:
    """Per method: the attack on its unlearned shadow runs (keys prefixed ``attack_``) and on
    its oracle runs (prefixed ``control_``); none for a role with fewer than 4 runs left (its
    runs diverged).

    :param runs: :func:`run_shadows`' records by role.
    """
    out = {}
    for method in methods:
        row: dict[str, Any] = {}
        for role, prefix in (("unlearned", "attack_"), ("oracle", "control_")):
            records = [r for r in runs[role] if r["method"] == method]
            if len(records) >= 4:   # fewer: its runs diverged; nothing to attack
                row.update({f"{prefix}{k}": v for k, v in attack(records).items()})
        out[method] = row
    return out
