"""Which entries a subnetwork may use: the maskable parameters of a network, the selection
"layers" (slices), the per-layer top-k rules the training forward and the stored masks share,
the initial draw of an entry and gradient masking."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch
from timm.models.vision_transformer import Attention
from torch import nn

from pall_avalanche.models.multihead import TaskIncrementalNet
from pall_avalanche.models.multitask import MultiHeadNet
from pall_avalanche.options import THRESHOLD_METHODS

__all__ = ["HEAD", "QKV_SLICES", "THRESHOLD_METHODS", "by_slice", "draw_initial", "kth_smallest",
           "mask_gradients_", "maskable_parameters", "restricted_topk_mask",
           "running_statistics_layers", "selection_slices", "slice_counts", "subnetwork_mask",
           "threshold_method", "topk_mask", "topk_threshold"]

#: Selection slices of a fused Q/K/V projection: W_Q, W_K and W_V.
QKV_SLICES = 3

#: The multi-head output layer's weight: not scored or masked (task t owns its rows).
HEAD = "head.weight"


def maskable_parameters(net: TaskIncrementalNet | MultiHeadNet) -> dict[str, nn.Module]:
    """Name → owning module of every maskable parameter: Conv2d/Linear weights and biases of
    the backbone, then, for a :class:`~pall_avalanche.models.TaskIncrementalNet`, the shared
    head's weight (masked by rows, not by scores)."""
    out: dict[str, nn.Module] = {}
    for module_name, module in net.backbone_modules():
        if isinstance(module, (nn.Conv2d, nn.Linear)):
            for attr in ("weight", "bias"):
                if getattr(module, attr, None) is not None:
                    out[f"{module_name}.{attr}"] = module
    if isinstance(net, TaskIncrementalNet):
        out[HEAD] = net.head
    return out


def running_statistics_layers(net: TaskIncrementalNet | MultiHeadNet
                              ) -> dict[str, nn.modules.batchnorm._NormBase]:
    """Name → module of every backbone norm layer with running statistics (``running_mean``,
    ``running_var``, ``num_batches_tracked``: BatchNorm with ``track_running_stats=True``)."""
    return {name: module for name, module in net.backbone_modules()
            if isinstance(module, nn.modules.batchnorm._NormBase) and module.track_running_stats}


def selection_slices(net: TaskIncrementalNet | MultiHeadNet) -> dict[str, int]:
    """Name → number of selection slices of every maskable parameter (as
    :func:`maskable_parameters`): 3 for the weight and bias of a fused Q/K/V projection (the
    ``qkv`` ``Linear`` child of a timm ``Attention``), whose row blocks W_Q, W_K, W_V are
    selected as three separate layers, as in the paper's reference; 1 for every other tensor."""
    fused = {id(module.qkv) for _, module in net.backbone_modules()
             if isinstance(module, Attention) and isinstance(getattr(module, "qkv", None),
                                                            nn.Linear)}
    return {name: QKV_SLICES if id(module) in fused and name != HEAD else 1
            for name, module in maskable_parameters(net).items()}


def by_slice(slices: int, select: Callable[..., torch.Tensor], *tensors: torch.Tensor
             ) -> torch.Tensor:
    """``select(i, *rows_i)`` for every slice i of ``tensors`` (all shaped alike), reassembled
    to their shape: slice i is the i-th row of the ``(slices, -1)`` view, i.e. the i-th block of
    the first dimension. With ``slices=1`` it is ``select(0, *tensors)`` itself."""
    if slices == 1:
        return select(0, *tensors)
    shape = tensors[0].shape
    if len(shape) == 0 or shape[0] % slices:
        raise ValueError(f"a tensor of shape {tuple(shape)} has no {slices} slices along its "
                         "first dimension")
    rows = [t.reshape(slices, -1) for t in tensors]
    return torch.stack([select(i, *(r[i] for r in rows)) for i in range(slices)]
                       ).reshape(shape)


def slice_counts(keep: int | Sequence[int], slices: int) -> list[int]:
    """Per-slice counts: an int for a one-slice tensor, or one count per slice."""
    try:
        counts = [int(k) for k in keep]
    except TypeError:                       # one number
        counts = [int(keep)]
    if len(counts) != slices:
        raise ValueError(f"keep={keep!r}: expected one count per slice ({slices} slices)")
    return counts


@torch.no_grad()
def draw_initial(module: nn.Module, name: str, like: torch.Tensor | None = None
                 ) -> torch.Tensor:
    """A fresh draw from the initialisation distribution φ of ``module.<attr>`` (the last
    component of ``name``): Kaiming-uniform (a=√5), i.e. U(±1/√fan_in), for weights; the same
    bound for biases. Also the distribution of the scores."""
    weight = module.weight
    fan_in = weight[0].numel()
    attr = name.rsplit(".", 1)[-1]
    target = weight if attr == "weight" else module.bias
    out = torch.empty_like(target if like is None else like)
    bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    return out.uniform_(-bound, bound)


#: How a per-layer threshold (a k-th smallest value) is found; every method gives the same
#: value, so the same masks bit for bit, and differs only in speed:
#:
#: - ``partition``: ``numpy.partition`` (O(n) introselect; CPU tensors only);
#: - ``topk``: ``torch.topk(sorted=False)`` of the smaller side (the k smallest or the
#:   n − k + 1 largest), whose extreme is the threshold (a radix select on the device);
#: - ``sort``: one ``torch.sort``;
#: - ``kthvalue``: ``torch.kthvalue`` (one thread block per slice on CUDA);
#: - ``auto``: ``partition`` on CPU, ``topk`` on any other device.
#:
#: Only ``partition`` hands values to the host; the others keep the step on the device.
#: (:data:`THRESHOLD_METHODS`, with the other option vocabularies in :mod:`pall_avalanche.options`.)


def threshold_method(method: str, device: torch.device) -> str:
    """The method :func:`kth_smallest` uses for ``method`` on ``device`` (``auto`` resolved).

    :raises ValueError: an unknown method, or ``partition`` for a tensor not on the CPU.
    """
    if method not in THRESHOLD_METHODS:
        raise ValueError(f"mask_threshold={method!r} is invalid; valid: {THRESHOLD_METHODS}")
    if method == "auto":
        return "partition" if device.type == "cpu" else "topk"
    if method == "partition" and device.type != "cpu":
        raise ValueError(f"mask_threshold='partition' needs CPU tensors, not {device.type} "
                         "ones; use topk, sort or kthvalue")
    return method


def topk_threshold(abs_scores: torch.Tensor, alpha: float, method: str = "auto"
                   ) -> torch.Tensor:
    """The per-layer threshold: the k-th smallest |score| with k = 1 + round((1−α)(n−1));
    entries with ``|s| >= threshold`` form the mask. A 0-d tensor on the scores' device."""
    n = abs_scores.numel()
    return kth_smallest(abs_scores, 1 + round((1.0 - alpha) * (n - 1)), method)


def kth_smallest(values: torch.Tensor, k: int, method: str = "auto") -> torch.Tensor:
    """The k-th smallest entry (1-based) of a tensor, as a 0-d tensor on its device, found by
    ``method`` (:data:`THRESHOLD_METHODS`; ``k`` is a Python int, so no method but
    ``partition`` waits for the device)."""
    flat = values.detach().reshape(-1)
    method = threshold_method(method, flat.device)
    if method == "partition":
        return torch.tensor(np.partition(flat.numpy(), k - 1)[k - 1], dtype=flat.dtype)
    if method == "kthvalue":
        return torch.kthvalue(flat, k).values
    if method == "sort":
        return torch.sort(flat).values[k - 1]
    largest = flat.numel() - k + 1            # the k-th smallest is the largest-th largest
    if k <= largest:
        return torch.topk(flat, k, largest=False, sorted=False).values.max()
    return torch.topk(flat, largest, largest=True, sorted=False).values.min()


def topk_mask(scores: torch.Tensor, alpha: float, slices: int = 1, method: str = "auto"
              ) -> torch.Tensor:
    """Bool mask of the entries of one tensor with the largest |score| at connectivity α,
    per slice (:func:`by_slice`): k from each slice's own entry count; the threshold found by
    ``method`` (:data:`THRESHOLD_METHODS`)."""
    def select(_: int, row: torch.Tensor) -> torch.Tensor:
        abs_scores = row.detach().abs()
        return abs_scores >= topk_threshold(abs_scores, alpha, method)
    return by_slice(slices, select, scores)


def restricted_topk_mask(scores: torch.Tensor, eligible: torch.Tensor,
                         keep: int | Sequence[int], slices: int = 1, method: str = "auto"
                         ) -> torch.Tensor:
    """Bool mask of the ``keep`` entries of ``eligible`` with the largest |score| (ties at the
    threshold kept); entries outside ``eligible`` are never selected. With ``slices > 1``,
    ``keep`` holds one count per slice and each slice is selected on its own. ``method``:
    :data:`THRESHOLD_METHODS`."""
    counts = slice_counts(keep, slices)

    def select(i: int, row: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        if counts[i] <= 0:
            return torch.zeros_like(allowed)
        ranked = torch.where(allowed, row.detach().abs(), -1.0)
        threshold = kth_smallest(ranked, ranked.numel() - counts[i] + 1, method)
        return allowed & (ranked >= threshold)
    return by_slice(slices, select, scores, eligible)


def subnetwork_mask(scores: torch.Tensor, alpha: float, slices: int = 1,
                    eligible: torch.Tensor | None = None,
                    keep: int | Sequence[int] | None = None, method: str = "auto"
                    ) -> torch.Tensor:
    """The learning task's mask of one scored tensor: :func:`topk_mask` at α, or, with
    ``eligible``, :func:`restricted_topk_mask` of ``keep`` (per slice either way; thresholds
    by ``method``). The one rule both the training forward (:class:`_MaskedWeight`) and the
    stored mask go through."""
    if eligible is None:
        return topk_mask(scores, alpha, slices, method)
    return restricted_topk_mask(scores, eligible, keep, slices, method)


@torch.no_grad()
def mask_gradients_(params: list[torch.Tensor], trainable: list[torch.Tensor],
                    weight_decay: float = 0.0) -> None:
    """``grad ← (grad + weight_decay · w) ⊙ trainable`` for every parameter with a gradient:
    frozen entries get an exactly-zero gradient (no weight decay), so a fresh SGD/Adam leaves
    them bit-identical. ``trainable`` holds float 0/1 tensors shaped like the parameters."""
    pairs = [(p, t) for p, t in zip(params, trainable, strict=True) if p.grad is not None]
    if not pairs:
        return
    grads = [p.grad for p, _ in pairs]
    if weight_decay:
        torch._foreach_add_(grads, [p for p, _ in pairs], alpha=weight_decay)
    torch._foreach_mul_(grads, [t for _, t in pairs])

