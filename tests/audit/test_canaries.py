"""The canary test (pall_avalanche.audit.canaries) and its runs' data
(pall_avalanche.data.tasks.with_canaries): the canaries join t's training set entry by entry
as drawn; the null is the set of within-run relabellings; the TPR at a low FPR read from
ranks is the ROC's; the test is calibrated; and on real runs it detects a model that
unlearns nothing but not PALL."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from helpers import FAST_CONFIG, seq
from scipy.stats import rankdata

from pall_avalanche.audit.attacks import tpr_at_fpr
from pall_avalanche.audit.canaries import _tpr_at_ranks, canary_test, run_canaries
from pall_avalanche.config import check_run_config
from pall_avalanche.data import build_benchmark
from pall_avalanche.data.device import device_images_of
from pall_avalanche.data.tasks import canary_members, with_canaries

CONFIG = {**FAST_CONFIG, "epochs": 10, "train_per_task": 40, "n_retrain_iters": 5}


def test_canaries_join_the_task_as_drawn_and_nothing_else_changes():
    plain = build_benchmark("digits", seed=3, n_tasks=5, train_per_task=40)
    task, count = 2, 60
    built = with_canaries(plain, task, count, seed=3)
    members = np.asarray(built.split.canaries["members"])
    assert built.split.canaries == {"task": task, "count": count, "members": members.tolist()}
    assert np.array_equal(members, canary_members(count, 3))
    assert 0 < len(members) < count and len(set(members.tolist())) == len(members)
    source = device_images_of(plain.train_stream[task].dataset)
    canaries = built.audit_canaries.eval()
    x = torch.stack([canaries[i][0] for i in range(count)])
    y = torch.tensor([int(canaries[i][1]) for i in range(count)])
    assert set(y.tolist()) <= {0, 1} and {int(canaries[i][2]) for i in range(count)} == {task}
    # each canary is a training input of the task with its entries reordered
    pool = np.sort(source.images.reshape(len(source), -1).numpy(), axis=1)
    for row in np.sort(x.reshape(count, -1).numpy(), axis=1):
        assert (np.abs(pool - row).max(axis=1) == 0).any()
    # the task's training set: its own examples, then the included canaries, entry by entry
    grown = built.train_stream[task].dataset.eval()
    assert len(grown) == len(source) + len(members) == built.split.train_sizes[task]
    for i in range(len(grown)):
        expected = ((source.images[i], source.targets[i]) if i < len(source)
                    else (x[members[i - len(source)]], y[members[i - len(source)]]))
        assert torch.equal(grown[i][0], expected[0]) and int(grown[i][1]) == int(expected[1])
    grown_images = device_images_of(built.train_stream[task].dataset)
    assert torch.equal(grown_images.images, torch.cat([source.images, x[members]]))
    # every other task and every test set as they were
    for stream in ("train_stream", "test_stream"):
        for t, (a, b) in enumerate(zip(getattr(plain, stream), getattr(built, stream),
                                       strict=True)):
            if stream == "train_stream" and t == task:
                continue
            assert torch.equal(device_images_of(a.dataset).images,
                               device_images_of(b.dataset).images)
    # another seed, other canaries and inclusions
    assert not np.array_equal(canary_members(count, 4), members)


def test_canary_runs_refuse_bad_settings_naming_the_key():
    with pytest.raises(ValueError, match=r"canaries=1 is invalid"):
        with_canaries(build_benchmark("digits", seed=0, n_tasks=5), 0, 1, seed=0)
    with pytest.raises(ValueError, match=r"canary_task=5 is not a task"):
        with_canaries(build_benchmark("digits", seed=0, n_tasks=5), 5, 10, seed=0)
    with pytest.raises(ValueError, match=r"canary_task and canaries go together"):
        check_run_config(CONFIG, "pall", [("canary_task", 1)])
    with pytest.raises(ValueError, match=r"a shadow run or a canary run, not both"):
        check_run_config(CONFIG, "pall", [("canary_task", 1), ("canaries", 10),
                                          ("shadow_task", 1), ("shadow_seed", 0)])
    with pytest.raises(ValueError, match=r"canary_task=7 is invalid: the tasks are 0\.\.4"):
        check_run_config(CONFIG, "pall", [("canary_task", 7), ("canaries", 10)])


def test_the_tpr_read_from_ranks_is_the_rocs():
    rng = np.random.default_rng(0)
    for fpr in (0.0, 0.01, 0.1, 0.5):
        for _ in range(30):
            scores = rng.integers(0, 12, size=40).astype(float)      # many ties
            labels = rng.permutation(np.r_[np.ones(15), np.zeros(25)]).astype(np.int8)
            found = _tpr_at_ranks(rankdata(scores), labels[None], fpr)[0]
            assert found == pytest.approx(tpr_at_fpr(scores, labels, fpr)), (fpr, scores)


def _records(scores: np.ndarray, member: np.ndarray, task: int = 1) -> list[dict]:
    """Canary runs' records holding ``scores`` as the logit-scaled confidence of label 0
    under ``task``'s head (two classes per task: logits (s, 0))."""
    out = []
    for seed, (row, inside) in enumerate(zip(scores, member, strict=True)):
        logits = np.zeros((len(row), 10))
        logits[:, 2 * task] = row
        out.append({"seed": seed, "split": {"classes_per_task": 2},
                    "probe": {"task": task, "targets": {"logits": logits.tolist(),
                                                        "y": [0] * len(row)},
                              "targets_at": {}, "members": np.flatnonzero(inside).tolist()}})
    return out


def _auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Mann-Whitney AUC, ties one half, by counting pairs."""
    pos, neg = scores[labels == 1], scores[labels == 0]
    return float(np.mean([(p > n) + 0.5 * (p == n) for p in pos for n in neg]))


def test_the_null_is_the_set_of_relabellings_within_each_run():
    """Two runs of four canaries, two included in each: the null's AUCs are exactly the
    pooled AUCs of the C(4, 2)² relabellings that keep each run's count, and the observed
    AUC's p-value is its rank among them."""
    scores = np.array([[0.3, 2.0, -1.0, 0.7], [1.5, -0.2, 0.1, 2.5]])
    member = np.array([[1, 1, 0, 0], [0, 1, 0, 1]], dtype=bool)
    found = canary_test(_records(scores, member), n_permutations=4000)
    # logit_confidence of label 0 under logits (s, 0) is s itself
    possible = []
    for first, second in itertools.product(itertools.combinations(range(4), 2), repeat=2):
        labels = np.zeros((2, 4), dtype=int)
        labels[0, list(first)], labels[1, list(second)] = 1, 1
        possible.append(_auc(scores.ravel(), labels.ravel()))
    observed = _auc(scores.ravel(), member.ravel().astype(int))
    assert found["canary_auc"] == pytest.approx(observed)
    exact = np.mean(np.asarray(possible) >= observed - 1e-12)
    assert found["canary_auc_p"] == pytest.approx(exact, abs=0.03)
    assert found["canary_count"] == 8 and found["canary_negatives"] == 4


def test_the_canary_test_is_calibrated_and_has_power():
    rng = np.random.default_rng(1)
    rejected, detected = 0, 0
    for _ in range(200):
        member = rng.random((3, 60)) < 0.5
        scores = rng.normal(size=(3, 60)) + rng.normal(size=(3, 1))     # runs differ in scale
        rejected += canary_test(_records(scores, member), n_permutations=199)["canary_auc_p"] < 0.05
        shifted = scores + 0.8 * member
        detected += canary_test(_records(shifted, member), n_permutations=199)[
            "canary_auc_p"] < 0.05
    assert rejected <= 0.05 * 200 + 2 * np.sqrt(200 * 0.05 * 0.95)      # about 13
    assert detected >= 0.9 * 200


def test_on_real_runs_the_canaries_find_a_model_that_keeps_t_and_not_pall(tmp_path):
    methods = ["pall", "pall_no_unlearning", "sequential"]
    records = run_canaries(methods, [0, 1], 200, CONFIG, tmp_path,
                           requests=seq("L0 L1 L2 U1 L3"), show_progress=False)
    assert len(records) == 6 and len(list((tmp_path / "canaries").rglob("seed*.json"))) == 6
    for record in records:
        probe = record["probe"]
        assert probe["members"] == record["split"]["canaries"]["members"]
        assert np.asarray(probe["targets"]["logits"]).shape == (200, 10)
        assert set(probe["targets_at"]) == {"after U1"}
    found = {m: canary_test([r for r in records if r["method"] == m], n_permutations=500)
             for m in methods}
    assert found["pall_no_unlearning"]["canary_auc_p"] < 0.01
    assert found["sequential"]["canary_auc_p"] < 0.01
    assert found["pall"]["canary_auc_p"] > 0.05
    assert found["pall_no_unlearning"]["canary_auc"] > found["pall"]["canary_auc"]
