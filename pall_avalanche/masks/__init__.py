"""Subnetwork masks: scores, per-layer top-k, straight-through estimator, bit-packed storage.

One package owns everything PALL, WSN, PackNet and the sparse ablations share (selection
rules in :mod:`~pall_avalanche.masks.selection`, storage in :mod:`~pall_avalanche.masks.maskset`,
the masked network in :mod:`~pall_avalanche.masks.network`):

- :func:`maskable_parameters` — the weights (and biases) of every ``Conv2d``/``Linear`` of a
  backbone, plus a :class:`~pall_avalanche.models.TaskIncrementalNet`'s shared head, whose rows
  are hard-wired per task (never scored); the per-task heads of a
  :class:`~pall_avalanche.models.multitask.MultiHeadNet` (an Avalanche ``MultiHeadClassifier``)
  are task parameters instead, like ViT's per-task tokens.
- :func:`running_statistics_layers` — the norm layers with running statistics (BatchNorm's
  default ``track_running_stats=True``), whose statistics are task state: one set per task.
- :class:`MaskSet` — a set of entries over those parameters, stored **bit-packed** (1 bit per
  entry); set algebra (``|``, ``&``, ``-``), counting, packing to and from bool tensors.
- :func:`topk_mask` — the per-layer mask keeping a fraction α of the entries with the largest
  |score| (threshold rank k = 1 + round((1−α)(n−1)), ties kept), the threshold found by one of
  :data:`THRESHOLD_METHODS` (the same masks bit for bit: ``numpy.partition`` on CPU,
  ``torch.topk`` of the smaller side on a GPU by default, with no host synchronisation);
  :func:`restricted_topk_mask` — the ``keep`` eligible entries of largest |score|;
  :func:`subnetwork_mask` — the one rule (either of the two) that both the training forward
  and the stored mask go through.
- :func:`selection_slices` — the "layers" of that rule. A layer is a tensor, except a fused
  Q/K/V projection (the ``qkv`` ``Linear`` of a timm ``Attention``, weight rows
  ``[0:d] = W_Q``, ``[d:2d] = W_K``, ``[2d:3d] = W_V``, bias likewise): it is masked **per
  slice**, each of its three row blocks selected as its own layer (its own top-k at α, its
  own ``keep`` count), as the paper's reference implementation masks W_Q, W_K and W_V as three
  separate layers (docs/fidelity.md). :func:`by_slice` applies a rule slice by slice; with
  one slice it is the rule itself, bit for bit.
- :class:`_MaskedWeight` — the fused straight-through estimator: forward ``where(m, w, 0)``,
  backward ``where(m, g, 0)`` to the weight and ``g·w·sign(s)`` to the score.
- :class:`SubnetworkNet` — runs a task-incremental network
  (:func:`~pall_avalanche.models.multitask.task_network`) under the mask and the normalisation
  statistics of the batch's task (``torch.func.functional_call``; nothing in the user's model
  is replaced), with per-task masks unpacked once and cached for evaluation.
"""


from pall_avalanche.masks.maskset import MaskSet
from pall_avalanche.masks.network import SubnetworkNet
from pall_avalanche.masks.selection import (
    HEAD,
    QKV_SLICES,
    THRESHOLD_METHODS,
    by_slice,
    draw_initial,
    kth_smallest,
    mask_gradients_,
    maskable_parameters,
    restricted_topk_mask,
    running_statistics_layers,
    selection_slices,
    slice_counts,
    subnetwork_mask,
    threshold_method,
    topk_mask,
    topk_threshold,
)

__all__ = [
    "HEAD",
    "QKV_SLICES",
    "THRESHOLD_METHODS",
    "MaskSet",
    "SubnetworkNet",
    "by_slice",
    "draw_initial",
    "kth_smallest",
    "mask_gradients_",
    "maskable_parameters",
    "restricted_topk_mask",
    "running_statistics_layers",
    "selection_slices",
    "slice_counts",
    "subnetwork_mask",
    "threshold_method",
    "topk_mask",
    "topk_threshold",
]
