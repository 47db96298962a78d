"""The shadow runs' rows (pall_avalanche.audit.shadows) on tiny real runs: a leaky variant's
control is the attack on its method's oracle runs, computed once for both and equal to what
each method's rows give on their own; computed in two processes, the rows are the same; runs
of several seeds stand side by side (every example fitted on its own seed's runs), and the
experiment spread over seeds draws disjoint runs of each."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import FAST_CONFIG, seq

from pall_avalanche.audit.shadows import (
    _attack_inputs,
    attack,
    attack_rows,
    attacked_heads,
    run_shadows,
    sharing_oracles,
    spread_gaps,
)
from pall_avalanche.audit.summary import spread_rows

CONFIG = {**FAST_CONFIG, "epochs": 1, "train_per_task": 40, "n_retrain_iters": 5}


@pytest.fixture(scope="module")
def shadows(tmp_path_factory):
    methods = ["pall", "pall_leak_head", "sequential"]
    runs = run_shadows(methods, 4, CONFIG, tmp_path_factory.mktemp("shadows"),
                       requests=seq("L0 L1 L2 U1 L3"), seed=0, show_progress=False)
    return methods, runs


def _equal(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def test_a_shared_control_is_attacked_once_with_the_rows_each_method_gets_alone(shadows):
    methods, runs = shadows
    together = attack_rows(runs, methods, n_permutations=50)
    for method in methods:
        alone, = attack_rows(runs, [method], n_permutations=50).values()
        assert together[method].keys() == alone.keys()
        different = [k for k in alone if not _equal(together[method][k], alone[k])]
        assert not different, (method, different)
    # the variant's oracle runs are PALL's: the same control, Sequential's its own
    control = [k for k in together["pall"] if k.startswith("control_")]
    assert control and all(_equal(together["pall"][k], together["pall_leak_head"][k])
                           for k in control)
    assert together["pall"]["control_auc"] != together["sequential"]["control_auc"]


def test_rows_computed_in_two_processes_are_the_rows_of_one(shadows):
    """Methods reading the same oracle runs go to one process together; the rows, and the
    methods each reported once through ``done``, are those of one process."""
    methods, runs = shadows
    assert sharing_oracles(runs, methods) == [["pall", "pall_leak_head"], ["sequential"]]
    heard = []
    apart = attack_rows(runs, methods, n_permutations=50, jobs=2, done=heard.append)
    one = attack_rows(runs, methods, n_permutations=50)
    assert sorted(heard) == sorted(methods) and list(apart) == methods
    for method in methods:
        assert apart[method].keys() == one[method].keys()
        assert all(_equal(apart[method][k], one[method][k]) for k in one[method])


@pytest.fixture(scope="module")
def two_seeds(tmp_path_factory):
    """PALL's shadow runs (8 per role) at two seeds: two class splits and initialisations."""
    out = tmp_path_factory.mktemp("two_seeds")
    return {seed: run_shadows(["pall"], 8, CONFIG, out, requests=seq("L0 L1 L2 U1 L3"),
                              seed=seed, show_progress=False) for seed in (0, 1)}


def test_runs_of_several_seeds_stand_side_by_side_each_example_on_its_own_seeds_runs(two_seeds):
    unlearned = {seed: sorted(runs["unlearned"], key=lambda r: r["config"]["shadow_seed"])
                 for seed, runs in two_seeds.items()}
    heads = attacked_heads(unlearned[0][0])
    alone = {seed: _attack_inputs(records, heads) for seed, records in unlearned.items()}
    features, member = _attack_inputs([*unlearned[0], *unlearned[1]], heads)
    n0 = alone[0][0].shape[1]
    assert features.shape == (8, n0 + alone[1][0].shape[1], len(heads))
    for seed, columns in ((0, slice(0, n0)), (1, slice(n0, None))):
        assert np.array_equal(features[:, columns], alone[seed][0])
        assert np.array_equal(member[:, columns], alone[seed][1])
    # one entry by hand: seed 1's third run, its first example, t's head
    record = unlearned[1][2]
    logits = np.asarray(record["probe"]["targets"]["logits"])[0]
    task, y = record["probe"]["task"], record["probe"]["targets"]["y"][0]
    block = logits[2 * task:2 * task + 2]
    assert features[2, n0, 0] == pytest.approx(block[y] - block[1 - y])
    assert member[2, n0] == (0 in record["probe"]["members"])
    with pytest.raises(ValueError, match=r"as many runs at every seed, got 8 at seed 0, 7 at "
                                         r"seed 1"):
        _attack_inputs([*unlearned[0], *unlearned[1][:7]], heads)


def test_a_spread_experiment_draws_disjoint_runs_of_every_seed(two_seeds):
    draws = spread_gaps(two_seeds, "pall", n_permutations=60)
    assert [d["draw"] for d in draws] == [0, 1] and {d["runs"] for d in draws} == {8}
    for d in draws:     # the j-th four shadow seeds of each seed, attacked as one experiment
        records = {role: [r for seed in (0, 1) for r in sorted(
            two_seeds[seed][role], key=lambda r: r["config"]["shadow_seed"])
            if 4 * d["draw"] <= r["config"]["shadow_seed"] < 4 * d["draw"] + 4]
            for role in ("unlearned", "oracle")}
        found = {time: {role: attack(records[role], attacked_heads(records["unlearned"][0], time),
                                     n_permutations=60, time=time) for role in records}
                 for time in ("end", "after U1")}
        gaps = {time: f["unlearned"]["auc"] - f["oracle"]["auc"] for time, f in found.items()}
        assert d["leak_auc"] == pytest.approx(max(gaps.values()))
    rows = spread_rows(two_seeds, ["pall", "sequential"], n_permutations=60)
    assert list(rows) == ["pall"]           # Sequential has no runs here
    assert rows["pall"]["leak_auc_spread_mean"] == pytest.approx(
        np.mean([d["leak_auc"] for d in draws]))
    assert rows == spread_rows(two_seeds, ["pall"], n_permutations=60, jobs=2)
