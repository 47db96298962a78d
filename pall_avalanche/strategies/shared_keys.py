"""Hyper-parameters several methods take with one meaning, default and range (PALL's and the
replay baselines' buffer, β, N_f; the regularisers' λ and LwF's distillation; the subnetwork
methods' α and mask thresholds). A method's declaration (the ``DECLARATIONS`` of its module) picks
the ones it takes; a configuration's ``alpha: 0.1`` sets the key for every method that takes
it."""

from __future__ import annotations

from dataclasses import replace

from pall_avalanche.catalog.declaration import Key
from pall_avalanche.options import SELECTION_NAMES, THRESHOLD_METHODS

__all__ = ["ALPHA", "BETA", "BUFFER_SELECTION", "BUFFER_SIZE", "EWC_LAMBDA", "LWF_ALPHA",
           "LWF_TEMPERATURE", "MASK_THRESHOLD", "N_RETRAIN_ITERS", "positive"]

#: α, a task subnetwork's share of each layer (the paper's 1/T on S-CIFAR10's 5 tasks).
ALPHA = Key(0.2, "α, per-layer connectivity of a task subnetwork", low=0, low_open=True,
            high=1, flag=True)
#: N_f, the paper's 50 retraining iterations.
N_RETRAIN_ITERS = Key(50, "N_f, iterations after an unlearning request", low=0, flag=True)
#: β, the paper's (and DER++'s) 0.5.
BETA = Key(0.5, "β, weight of the logit-MSE rehearsal term", low=0, flag=True)
#: The paper's S-CIFAR10 memory of 500 samples.
BUFFER_SIZE = Key(500, "total episodic memory, split over the tasks", low=1, flag=True)
#: The paper's random choice of buffer samples (its Table A3 compares the others).
BUFFER_SELECTION = Key("random", "how buffer samples are chosen", choices=SELECTION_NAMES)
#: EWC's λ, the paper's S-CIFAR10 value (also LSF's EWC term).
EWC_LAMBDA = Key(100.0, "λ of EWC's penalty", low=0)
#: LwF's distillation weight (the paper's default; also in LSF).
LWF_ALPHA = Key(1.0, "weight of LwF's distillation", low=0)
#: LwF's temperature (the paper's default; also in LSF).
LWF_TEMPERATURE = Key(2.0, "LwF's temperature", low=0, low_open=True)
#: How the subnetwork methods find per-layer mask thresholds: a speed option, the same masks.
MASK_THRESHOLD = Key(None, "how per-layer mask thresholds are found (speed only: the same "
                     "masks); null: the fastest for the device", kind=str,
                     choices=THRESHOLD_METHODS, nullable=True, flag=True)


def positive(key: Key) -> Key:
    """``key`` with 0 excluded (a method whose term vanishes at 0)."""
    return replace(key, low=0, low_open=True)
