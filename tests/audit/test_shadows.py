"""The shadow runs' rows (pall_avalanche.audit.shadows) on tiny real runs: a leaky variant's
control is the attack on its method's oracle runs, computed once for both and equal to what
each method's rows give on their own; computed in two processes, the rows are the same."""

from __future__ import annotations

import math

import pytest
from helpers import FAST_CONFIG, seq

from pall_avalanche.audit.shadows import attack_rows, run_shadows, sharing_oracles

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
