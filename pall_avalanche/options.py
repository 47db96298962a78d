"""The option vocabularies, one home for each, torch-free: the configuration checks, the
command line and the strategies that take these options all read them from here."""

from __future__ import annotations

__all__ = ["AMP_MODES", "INPUT_PIPELINES", "LR_SCHEDULES", "OPTIMIZERS", "SELECTION_NAMES",
           "THRESHOLD_METHODS"]

#: ``optimizer``: the optimizers a run builds from its configuration (SGD or Adam).
OPTIMIZERS = ("sgd", "adam")
#: ``lr_schedule``: a constant learning rate, or cosine annealing per epoch.
LR_SCHEDULES = ("constant", "cosine")
#: ``amp``: mixed precision of the training forward passes (``None``, the default: off).
AMP_MODES = ("bf16",)
#: ``input_pipeline``: where training batches are assembled (on the device, or sample by
#: sample through Avalanche's loaders).
INPUT_PIPELINES = ("batched", "per_sample")
#: ``mask_threshold``: how a layer's top-k threshold of the mask scores is found (the same
#: masks whichever; ``auto`` picks per device).
THRESHOLD_METHODS = ("auto", "partition", "topk", "sort", "kthvalue")
#: ``buffer_selection``: the buffer selections of Table A3 (the functions:
#: :data:`pall_avalanche.rehearsal.SELECTIONS`).
SELECTION_NAMES = ("random", "herding", "entropy", "confidence", "logit_distance")
