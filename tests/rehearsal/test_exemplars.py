"""The buffer selections of Table A3 (pall_avalanche.rehearsal.exemplars) on hand-made
inputs."""

from __future__ import annotations

import pytest
import torch

from pall_avalanche.rehearsal import SELECTIONS, select_exemplars


# ------------------------------------------------------------------ selection strategies
def test_entropy_confidence_logit_distance_pick_by_hand():
    targets = torch.tensor([0, 0, 0, 1, 1, 1])
    logits = torch.tensor([[5.0, 0.0], [0.1, 0.0], [2.0, 0.0],     # class 0
                           [0.0, 0.5], [0.0, 9.0], [1.0, 0.0]])    # class 1 (last: wrong)
    # entropy: closest to uniform → index 1 in class 0; index 3 (|0.5|) in class 1
    assert select_exemplars(targets, 2, "entropy", logits=logits).tolist() == [1, 3]
    # confidence: largest max-probability → index 0; index 4
    assert select_exemplars(targets, 2, "confidence", logits=logits).tolist() == [0, 4]
    # logit distance |z_y - max_other|: class 0 → 5, 0.1, 2 → index 1; class 1 → 0.5, 9, 1
    assert select_exemplars(targets, 2, "logit_distance", logits=logits).tolist() == [1, 3]
    # 4 samples: 2 per class, the two best of each
    assert select_exemplars(targets, 4, "logit_distance", logits=logits).tolist() == [1, 2, 3, 5]


def test_herding_picks_the_sample_nearest_the_mean_first():
    targets = torch.zeros(4, dtype=torch.long)
    # normalised: a=(1,0) b=(0,1) c=(.707,.707) d=(.995,.0995); class mean μ=(.676,.452)
    features = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [1.0, 0.1]])
    # k=1: ‖c−μ‖² = .066 < ‖d−μ‖² = .21 < ‖a−μ‖² = .31 < ‖b−μ‖² = .76
    assert select_exemplars(targets, 1, "herding", features=features).tolist() == [2]
    # k=2: ‖(c+d)/2−μ‖² = .033 < ‖(c+a)/2−μ‖² = .041 < ‖(c+b)/2−μ‖² = .265
    two = select_exemplars(targets, 2, "herding", features=features).tolist()
    assert two == [2, 3]
    assert sorted(select_exemplars(targets, 4, "herding", features=features).tolist()) == [
        0, 1, 2, 3]


def test_random_selection_is_class_balanced_with_remainder_first():
    torch.manual_seed(0)
    targets = torch.tensor([1, 0, 1, 0, 1, 0, 1, 1])
    picked = select_exemplars(targets, 5, "random")
    assert picked.tolist() == sorted(picked.tolist()) and len(set(picked.tolist())) == 5
    counts = torch.bincount(targets[picked], minlength=2).tolist()
    assert counts == [3, 2]


def test_selection_errors_name_the_bad_value():
    targets = torch.tensor([0, 1])
    with pytest.raises(ValueError, match=r"unknown buffer selection 'best'.*'herding'"):
        select_exemplars(targets, 2, "best")
    with pytest.raises(ValueError, match="'entropy' needs the samples' logits"):
        select_exemplars(targets, 2, "entropy")
    with pytest.raises(ValueError, match="'herding' needs the samples' features"):
        select_exemplars(targets, 2, "herding")
    assert set(SELECTIONS) == {"random", "herding", "entropy", "confidence", "logit_distance"}
