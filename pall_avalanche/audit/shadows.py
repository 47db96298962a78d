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

import hashlib
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from functools import partial
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

from pall_avalanche.audit.attacks import attack_summary, confidence_features
from pall_avalanche.audit.exposure import klom_figures, retained_figures
from pall_avalanche.audit.oracle import END, not_learned, oracle_sequence, probe_times, time_after
from pall_avalanche.audit.permutation import (
    N_PERMUTATIONS,
    lower_bound,
    membership_test,
    p_value,
    upper_bound,
    worst_over_times,
)
from pall_avalanche.audit.probes import ShadowProbe
from pall_avalanche.audit.twins import run_sharing_twins
from pall_avalanche.audit.verdict import SIMULTANEOUS_LEVEL
from pall_avalanche.requests import RequestSequence
from pall_avalanche.runs.batch import run_specs
from pall_avalanche.runs.spec import RunSpec, plan
from pall_avalanche.runs.wandb_logging import default_group

__all__ = ["END", "SHADOW_TRAIN_SEED_OFFSET", "ShadowProbe", "attack", "attack_rows",
           "probe_times", "run_shadows", "shadow_specs", "sharing_oracles", "spread_gaps"]

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
    times = probe_times(requests)
    for role, specs in shadow_specs(methods, n_shadows, config, requests=requests,
                                    seed=seed).items():
        run = partial(run_specs, out_dir=out / role, group=default_group(config),
                      checkpoints=False, probe=partial(ShadowProbe, task, times[role]),
                      skip_diverged=True, **options)
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


def attacked_heads(record: Mapping[str, Any], time: str = END) -> list[int]:
    """The heads the attack reads at ``time``, from a record of the audited sequence R: the
    audited task's and those of the tasks R learns after it by then."""
    task = record["probe"]["task"]
    requests = list(RequestSequence(record["requests"], record["split"]["n_tasks"]))
    if time != END:       # up to the request the time follows
        requests = requests[:[time_after(r) for r in requests].index(time) + 1]
    order = [r.task for r in requests if r.is_learn]
    return [task, *order[order.index(task) + 1:]]


def _targets(record: Mapping[str, Any], time: str) -> Mapping[str, Any]:
    probe = record["probe"]
    return probe["targets"] if time == END else probe["targets_at"][time]


def _attack_inputs(records: Sequence[Mapping[str, Any]], heads: Sequence[int],
                   time: str = END) -> tuple[np.ndarray, np.ndarray]:
    """(features (runs, examples, heads), membership (runs, examples)) of one method's runs at
    ``time``. Runs of several seeds (each its own class split, so its own target examples)
    stand side by side: the examples of every seed, the i-th run of each seed in row i (as
    many runs per seed), so that every example is fitted on its own seed's runs only."""
    by_seed: dict[int, list[Mapping[str, Any]]] = {}
    for record in records:
        by_seed.setdefault(record["seed"], []).append(record)
    if len({len(runs) for runs in by_seed.values()}) > 1:
        raise ValueError("shadow runs of several seeds need as many runs at every seed, got "
                         + ", ".join(f"{len(v)} at seed {s}" for s, v in by_seed.items()))
    features, member = [], []
    for runs in by_seed.values():
        cpt = runs[0]["split"]["classes_per_task"]
        y = np.asarray(runs[0]["probe"]["targets"]["y"])
        features.append(np.stack([confidence_features(np.asarray(_targets(r, time)["logits"]),
                                                      y, heads, cpt) for r in runs]))
        member.append(np.zeros(features[-1].shape[:2], dtype=bool))
        for i, record in enumerate(runs):
            member[-1][i, record["probe"]["members"]] = True
    return np.concatenate(features, axis=1), np.concatenate(member, axis=1)


def attack(records: Sequence[Mapping[str, Any]], heads: Sequence[int], *,
           n_permutations: int = N_PERMUTATIONS, time: str = END,
           known: dict[bytes, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The per-example attack (leave one run out) reading ``heads`` and the task-level IN/OUT
    AUC over one method's shadow runs of one role (module docstring):
    :func:`~pall_avalanche.audit.attacks.attack_summary`'s keys, ``runs``, ``negatives``
    (the distinct target examples, the independent negatives a TPR at an FPR rests on), and
    the permutation nulls ``null_auc`` / ``null_inout_auc`` (arrays,
    :func:`~pall_avalanche.audit.permutation.membership_test`; the same permutations for every
    call with the same memberships, so nulls of two times or two roles pair up), on the
    models at ``time`` (:data:`END` or a label of :func:`probe_times`).

    ``known`` holds attacks already computed, by their inputs (the runs' statistics and
    memberships): the same runs read by several methods (the oracle runs a leaky variant
    shares with its method) are attacked once; the dict returned may be one of them, to be
    read, not changed."""
    features, member = _attack_inputs(records, heads, time)
    inputs = hashlib.sha1(b"".join((features.tobytes(), member.tobytes(),
                                    str((features.shape, n_permutations)).encode()))).digest()
    if known is not None and inputs in known:
        return known[inputs]
    test = membership_test(features, member, n_permutations=n_permutations)
    out: dict[str, Any] = attack_summary(test["scores"], member)
    out.update(runs=len(records), negatives=int(member.shape[1]),
               max_example_auc=test["max_example_auc"],
               **{key: value for key, value in test.items() if key.startswith("null_")})
    if known is not None:
        known[inputs] = out
    return out


def _times(records: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[str]:
    """The times every run of every role was probed at: :data:`END` first."""
    timed = [set(r["probe"].get("targets_at", {})) for role in records.values() for r in role]
    return [END, *sorted(set.intersection(*timed))]


def _worst_time(name: str, found: Mapping[str, Mapping[str, Mapping[str, Any]]]
                ) -> dict[str, Any]:
    """The attack statistic ``name`` against its control over the probed times (``found``:
    time → role → :func:`attack`): ``leak_<name>`` is the largest difference (at
    ``leak_<name>_time``), its p-value ``_p`` from the largest difference under each
    permutation (the same permutations at every time and in both roles: a max-statistic
    test), ``_upper`` the one-sided 95 % bound at that time, ``_bound`` the largest of the
    times' one-sided bounds at :data:`~pall_avalanche.audit.verdict.SIMULTANEOUS_LEVEL`
    split over the times (so all hold together), and per time ``leak_<name>[<time>]`` with
    its own ``_p``."""
    gaps = {time: (roles["unlearned"][name] - roles["oracle"][name],
                   roles["unlearned"][f"null_{name}"] - roles["oracle"][f"null_{name}"])
            for time, roles in found.items()}
    out = worst_over_times(f"leak_{name}", gaps)
    level = 1 - (1 - SIMULTANEOUS_LEVEL) / len(gaps)
    out[f"leak_{name}_upper"] = upper_bound(*gaps[out[f"leak_{name}_time"]], 0.0)
    out[f"leak_{name}_bound"] = max(upper_bound(d, n, 0.0, level) for d, n in gaps.values())
    return out


def _by_shadow_seed(runs: Mapping[str, Sequence[dict]], method: str
                    ) -> tuple[dict[str, dict[int, dict]], list[int]]:
    """``method``'s runs of both roles by shadow seed, and the shadow seeds both roles have,
    in order: the runs paired (a diverged run drops its pair), so that the attacks of both
    roles see the same memberships and the same permutations of them."""
    mine = {role: {r["config"]["shadow_seed"]: r for r in runs[role] if r["method"] == method}
            for role in ("unlearned", "oracle")}
    return mine, sorted(set(mine["unlearned"]) & set(mine["oracle"]))


def sharing_oracles(runs: Mapping[str, Sequence[dict]], methods: Sequence[str]
                    ) -> list[list[str]]:
    """``methods`` grouped by the oracle runs they read (a leaky variant's are its method's
    records under its name: :func:`~pall_avalanche.audit.twins.run_sharing_twins`), the
    largest group first."""
    groups: dict[tuple, list[str]] = {}
    for method in methods:
        read = tuple(sorted((r["config"]["shadow_seed"], r["config_hash"], r["code"])
                            for r in runs["oracle"] if r["method"] == method))
        groups.setdefault(read, []).append(method)
    return sorted(groups.values(), key=len, reverse=True)


def attack_rows(runs: Mapping[str, Sequence[dict]], methods: Sequence[str], *,
                n_permutations: int = N_PERMUTATIONS,
                done: Callable[[str], None] | None = None, jobs: int = 1
                ) -> dict[str, dict[str, Any]]:
    """Per method: the attack on its unlearned shadow runs (keys prefixed ``attack_``) and on
    its oracle runs (prefixed ``control_``), each statistic's permutation p-value
    (``attack_auc_p``, ...), the attack against its control (``leak_auc`` = attack AUC −
    control AUC, and ``leak_inout_auc``, each with ``_p``, its permutation p-value, and
    its worst time over the end and the times of :func:`probe_times` with ``_time``, ``_p``,
    ``_upper`` and ``_bound``: :func:`_worst_time`; the attacks' AUCs, at the per-example
    gap's worst time, with ``_low`` / ``_high``, their two-sided 95 % interval by the same
    inversion), KLoM per example group (final models) and the
    retained-set exposure (:mod:`~pall_avalanche.audit.exposure`), and the audited task's
    learning checks over the unlearned runs (``shadow_not_learned`` of ``shadow_runs``).
    The attacks, their comparison and KLoM read the runs of both roles paired by shadow seed
    (at least 4 pairs; fewer: its runs diverged).

    :param runs: :func:`run_shadows`' records by role.
    :param done: called with each method's name once its row is computed (progress).
    :param jobs: processes computing the rows: each takes the methods that read the same
        oracle runs (:func:`sharing_oracles`; their control is attacked once) at a time. The
        rows are the same for every ``jobs``.
    """
    groups = sharing_oracles(runs, methods)
    if jobs > 1 and len(groups) > 1:
        found: dict[str, dict[str, Any]] = {}
        with ProcessPoolExecutor(min(jobs, len(groups)), mp_context=get_context("spawn")) as pool:
            pending = [pool.submit(attack_rows, {role: [r for r in records if r["method"] in group]
                                                 for role, records in runs.items()},
                                   group, n_permutations=n_permutations) for group in groups]
            for future in as_completed(pending):
                rows = future.result()
                found.update(rows)
                for method in rows:
                    if done is not None:
                        done(method)
        return {method: found[method] for method in methods}
    out = {}
    known: dict[bytes, dict[str, Any]] = {}     # the attacks done, by their inputs
    for method in methods:
        mine, pairs = _by_shadow_seed(runs, method)
        row: dict[str, Any] = {"shadow_runs": len(mine["unlearned"]),
                               "shadow_not_learned": not_learned(mine["unlearned"].values())}
        records = {role: [mine[role][i] for i in pairs] for role in mine}
        if len(pairs) >= 4:
            found = {time: {role: attack(records[role],
                                         attacked_heads(records["unlearned"][0], time),
                                         n_permutations=n_permutations, time=time,
                                         known=known)
                            for role in records}
                     for time in _times(records)}
            for name in ("auc", "inout_auc", "max_example_auc"):
                row.update(_worst_time(name, found))
            # the attacks' own figures at the per-example gap's worst time
            for role, prefix in (("unlearned", "attack_"), ("oracle", "control_")):
                shown = found[row["leak_auc_time"]][role]
                for key, value in shown.items():
                    if not key.startswith("null_"):
                        row[prefix + key] = value
                for name in ("auc", "inout_auc"):
                    value, null = shown[name], shown[f"null_{name}"]
                    row[f"{prefix}{name}_p"] = p_value(value, null)
                    row[f"{prefix}{name}_low"] = lower_bound(value, null, 0.5, 0.975)
                    row[f"{prefix}{name}_high"] = upper_bound(value, null, 0.5, 0.975)
            row.update(klom_figures(records["unlearned"], records["oracle"],
                                    n_permutations=n_permutations))
        row.update(retained_figures(records["unlearned"]))
        out[method] = row
        if done is not None:
            done(method)
    return out


def spread_gaps(runs: Mapping[int, Mapping[str, Sequence[dict]]], method: str, *,
                n_permutations: int = N_PERMUTATIONS) -> list[dict[str, Any]]:
    """``method``'s per-example gap to its control with its shadow runs spread over the k
    seeds of ``runs`` (seed → :func:`run_shadows`' records by role, each seed its own class
    split and initialisation) at the cost of one seed's: every seed's n paired runs (by shadow
    seed) cut into k disjoint draws of ⌊n / k⌋, draw j taking the j-th of every seed, so a
    draw holds about n runs over the k seeds and the attack is fitted within each seed
    (:func:`_attack_inputs`). Per draw: ``draw``, ``runs``, ``leak_auc`` (the worse time, as
    :func:`attack_rows`') and ``leak_auc_p``."""
    paired = {seed: _by_shadow_seed(roles, method) for seed, roles in runs.items()}
    size = min(len(shadow_seeds) for _, shadow_seeds in paired.values()) // len(runs)
    out = []
    for draw in range(len(runs) if size >= 4 else 0):     # 4: the attack's fewest runs
        records = {role: [mine[role][i] for mine, shadow_seeds in paired.values()
                          for i in shadow_seeds[draw * size:(draw + 1) * size]]
                   for role in ("unlearned", "oracle")}
        found = {time: {role: attack(records[role],
                                     attacked_heads(records["unlearned"][0], time),
                                     n_permutations=n_permutations, time=time)
                        for role in records}
                 for time in _times(records)}
        gap = _worst_time("auc", found)
        out.append({"draw": draw, "runs": len(records["unlearned"]),
                    "leak_auc": gap["leak_auc"], "leak_auc_p": gap["leak_auc_p"]})
    return out
