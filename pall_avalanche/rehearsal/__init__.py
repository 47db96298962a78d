"""Rehearsal: which samples a task keeps, how they are stored, and what is trained from them —
shared by PALL (its DER++ buffer and retraining) and the replay baselines (ER, DER++, GEM,
ER (Retraining); :mod:`pall_avalanche.strategies.replay`).

- :mod:`~pall_avalanche.rehearsal.exemplars`, buffer selection (Table A3): :data:`SELECTIONS`
  per class, :func:`select_exemplars` class-balanced; :func:`class_stratified_indices` for
  every mini-batch drawn from a buffer.
- :mod:`~pall_avalanche.rehearsal.memory`: :class:`EpisodicMemory` keeps a buffer per task
  (samples, for DER++ and PALL with their logits): selection, storage and state.
- :mod:`~pall_avalanche.rehearsal.objective`: :class:`ReplayObjective` is what is trained from
  those buffers (CE + β·MSE replay, the uniform-prediction term of unlearning) in the one
  replay loop: PALL retrains chosen entries with it, the replay baselines replay, fine-tune
  away and retrain from scratch with it.
"""

from pall_avalanche.rehearsal.exemplars import (
    SELECTIONS,
    class_stratified_indices,
    select_exemplars,
)
from pall_avalanche.rehearsal.memory import EpisodicMemory, logits_and_features
from pall_avalanche.rehearsal.objective import (
    ReplayObjective,
    check_replay_settings,
    uniform_target,
)

__all__ = [
    "SELECTIONS",
    "EpisodicMemory",
    "ReplayObjective",
    "check_replay_settings",
    "class_stratified_indices",
    "logits_and_features",
    "select_exemplars",
    "uniform_target",
]
