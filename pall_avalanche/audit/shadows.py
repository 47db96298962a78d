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
example was IN and where it was OUT (leave one run out,
:func:`~pall_avalanche.audit.permutation.lira_loo_scores`), and the likelihood ratios of all
runs and examples give the ROC (AUC, TPR at 1 % and 0.1 % FPR). At task level, each run's
own IN examples against its OUT examples give one AUC per run (their mean): 0.5 when the
model says nothing about which half it saw.

The same attack (the same heads: t's and those R learns after it) against oracle runs (R′:
t never learned, membership drawn the same way) is the control. Each attack's permutation
null shuffles every example's memberships across the runs and refits
(:func:`~pall_avalanche.audit.permutation.membership_test`; it keeps each example's number of
IN runs, not each run's class-balanced half, so it is conservative); its AUC's 95 % interval
inverts that test under a shift model; the attack is
compared with its control through the difference of their AUCs, whose null comes from the
same permutations of both (the runs share their memberships). An exact method's difference
stays within its null. KLoM and the retained-set exposure
(:mod:`~pall_avalanche.audit.exposure`) read the same runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from pall_avalanche.audit.attacks import attack_summary, confidence_features
from pall_avalanche.audit.exposure import klom_figures, retained_figures
from pall_avalanche.audit.oracle import not_learned, oracle_sequence
from pall_avalanche.audit.permutation import (
    N_PERMUTATIONS,
    lower_bound,
    membership_test,
    p_value,
    upper_bound,
)
from pall_avalanche.audit.probes import ShadowProbe
from pall_avalanche.audit.twins import run_sharing_twins
from pall_avalanche.requests import RequestKind, RequestSequence
from pall_avalanche.runs.batch import run_specs
from pall_avalanche.runs.spec import RunSpec, plan
from pall_avalanche.runs.wandb_logging import default_group

__all__ = ["SHADOW_TRAIN_SEED_OFFSET", "ShadowProbe", "attack", "attack_rows", "run_shadows",
           "shadow_specs"]

#: Shadow run i trains with training seed ``seed + SHADOW_TRAIN_SEED_OFFSET + i`` (its own
#: records, apart from the oracle comparison's).
SHADOW_TRAIN_SEED_OFFSET = 200_000


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
    _, unlearned = oracle_sequence(requests)
    task = unlearned[0]
    out = Path(out_dir) / "shadows"
    options = {k: v for k, v in options.items() if k != "checkpoints"}
    records = {}
    for role, specs in shadow_specs(methods, n_shadows, config, requests=requests,
                                    seed=seed).items():
        run = partial(run_specs, out_dir=out / role, group=default_group(config),
                      checkpoints=False, probe=partial(ShadowProbe, task), skip_diverged=True,
                      **options)
        records[role] = run(specs) if role == "unlearned" else run_sharing_twins(specs, run)
    return records


def shadow_specs(methods: Sequence[str], n_shadows: int, config: dict, *,
                 requests: RequestSequence, seed: int) -> dict[str, list[RunSpec]]:
    """:func:`run_shadows`' runs by role: ``n_shadows`` of every method on R and on R′, each
    on its random half of the attacked task."""
    if n_shadows < 4:
        raise ValueError(f"--shadows {n_shadows}: the attack needs at least 4 shadow runs per "
                         "method")
    oracle, unlearned = oracle_sequence(requests)
    return {role: [spec for i in range(n_shadows)
                   for spec in plan(methods, [seed], config, requests=sequence,
                                    overrides=[("shadow_task", unlearned[0]),
                                               ("shadow_seed", i)],
                                    train_seed_offset=SHADOW_TRAIN_SEED_OFFSET + i,
                                    modules=[ShadowProbe.__module__])]
            for role, sequence in (("unlearned", requests), ("oracle", oracle))}


def attacked_heads(record: Mapping[str, Any]) -> list[int]:
    """The heads the attack reads, from a record of the audited sequence R: the audited
    task's and those of the tasks R learns after it."""
    task = record["probe"]["task"]
    order = [r["task"] for r in record["requests"] if r["kind"] == RequestKind.LEARN]
    return [task, *order[order.index(task) + 1:]]


def _attack_inputs(records: Sequence[Mapping[str, Any]], heads: Sequence[int]
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(features (runs, examples, heads), membership (runs, examples)) of one method's runs."""
    first = records[0]
    cpt = first["split"]["classes_per_task"]
    y = np.asarray(first["probe"]["targets"]["y"])
    features = np.stack([confidence_features(np.asarray(r["probe"]["targets"]["logits"]), y,
                                             heads, cpt) for r in records])
    member = np.zeros(features.shape[:2], dtype=bool)
    for i, record in enumerate(records):
        member[i, record["probe"]["members"]] = True
    return features, member


def attack(records: Sequence[Mapping[str, Any]], heads: Sequence[int], *,
           n_permutations: int = N_PERMUTATIONS) -> dict[str, Any]:
    """The per-example attack (leave one run out) reading ``heads`` and the task-level IN/OUT
    AUC over one method's shadow runs of one role (module docstring):
    :func:`~pall_avalanche.audit.attacks.attack_summary`'s keys, ``runs``, ``negatives``
    (the distinct target examples, the independent negatives a TPR at an FPR rests on), and
    the permutation nulls ``null_auc`` / ``null_inout_auc`` (arrays,
    :func:`~pall_avalanche.audit.permutation.membership_test`)."""
    features, member = _attack_inputs(records, heads)
    test = membership_test(features, member, n_permutations=n_permutations)
    out: dict[str, Any] = attack_summary(test["scores"], member)
    out.update(runs=len(records), negatives=int(member.shape[1]),
               null_auc=test["null_auc"], null_inout_auc=test["null_inout_auc"])
    return out


def attack_rows(runs: Mapping[str, Sequence[dict]], methods: Sequence[str], *,
                n_permutations: int = N_PERMUTATIONS,
                done: Callable[[str], None] | None = None) -> dict[str, dict[str, Any]]:
    """Per method: the attack on its unlearned shadow runs (keys prefixed ``attack_``) and on
    its oracle runs (prefixed ``control_``), each statistic's permutation p-value
    (``attack_auc_p``, ...), the attack against its control (``leak_auc`` = attack AUC −
    control AUC, and ``leak_inout_auc``, each with ``_p``, its permutation p-value, and
    ``_upper``, its one-sided 95 % upper bound; the attacks' AUCs with ``_low`` / ``_high``,
    their two-sided 95 % interval by the same inversion), KLoM per example group and the
    retained-set exposure (:mod:`~pall_avalanche.audit.exposure`), and the audited task's
    learning checks over the unlearned runs (``shadow_not_learned`` of ``shadow_runs``).
    The attacks, their comparison and KLoM read the runs of both roles paired by shadow seed
    (at least 4 pairs; fewer: its runs diverged).

    :param runs: :func:`run_shadows`' records by role.
    :param done: called with each method's name once its row is computed (progress).
    """
    out = {}
    for method in methods:
        mine = {role: {r["config"]["shadow_seed"]: r for r in runs[role] if r["method"] == method}
                for role in ("unlearned", "oracle")}
        row: dict[str, Any] = {"shadow_runs": len(mine["unlearned"]),
                               "shadow_not_learned": not_learned(mine["unlearned"].values())}
        # the runs of both roles paired by shadow seed (a diverged run drops its pair), so that
        # both attacks see the same memberships and the same permutations of them
        pairs = sorted(set(mine["unlearned"]) & set(mine["oracle"]))
        records = {role: [mine[role][i] for i in pairs] for role in mine}
        if len(pairs) >= 4:
            heads = attacked_heads(records["unlearned"][0])
            found = {role: attack(records[role], heads, n_permutations=n_permutations)
                     for role in records}
            for role, prefix in (("unlearned", "attack_"), ("oracle", "control_")):
                for key, value in found[role].items():
                    if not key.startswith("null_"):
                        row[prefix + key] = value
                for name in ("auc", "inout_auc"):
                    value, null = found[role][name], found[role][f"null_{name}"]
                    row[f"{prefix}{name}_p"] = p_value(value, null)
                    row[f"{prefix}{name}_low"] = lower_bound(value, null, 0.5, 0.975)
                    row[f"{prefix}{name}_high"] = upper_bound(value, null, 0.5, 0.975)
            for name in ("auc", "inout_auc"):
                diff = found["unlearned"][name] - found["oracle"][name]
                null = found["unlearned"][f"null_{name}"] - found["oracle"][f"null_{name}"]
                row[f"leak_{name}"] = diff
                row[f"leak_{name}_p"] = p_value(diff, null)
                row[f"leak_{name}_upper"] = upper_bound(diff, null, 0.0)
            row.update(klom_figures(records["unlearned"], records["oracle"],
                                    n_permutations=n_permutations))
        row.update(retained_figures(records["unlearned"]))
        out[method] = row
        if done is not None:
            done(method)
    return out
