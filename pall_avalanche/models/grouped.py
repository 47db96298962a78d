"""Many forward passes of one network as one batched pass (:func:`forward_groups`).

A replay loss runs a mini-batch of every remaining task through that task (its head, its
subnetwork, its normalisation statistics): one forward pass per task and mini-batch, so a
training step would issue |Ω| times the operations of a plain one. Here the G × r
mini-batches (r for each of G tasks) are one call: the backbone runs under
``torch.func.vmap`` over the mini-batches (:func:`vmap_backbone`), each group with its task's
substituted parameters (a subnetwork's masked weights, stacked), and the task heads are one
batched matrix product (:meth:`~pall_avalanche.models.TaskIncrementalNet.forward_groups`).
Each mini-batch stays its own forward pass: a norm layer normalises it with its own batch
statistics, dropout draws its own masks, and the running statistics of a network's own norm
layers end as if the mini-batches had run one after another. The results equal the
one-by-one passes up to floating-point reduction order (docs/explanation/performance.md,
"Remaining tasks in one pass").

A network without ``forward_groups`` (an Avalanche model whose ``forward`` calls its own
per-task heads) runs its mini-batches one after another.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

import torch
from torch import nn
from torch.func import functional_call, vmap
from torch.nn import functional as F

__all__ = ["MASK_VALUE", "batchable", "forward_groups", "group_losses", "stack_groups",
           "vmap_backbone"]

#: The logit of a unit a task does not use (Avalanche's ``MultiHeadClassifier`` default).
MASK_VALUE = -1000.0

_STATISTICS = ("running_mean", "running_var", "num_batches_tracked")


def stack_groups(outputs: Sequence[Sequence[torch.Tensor]]) -> torch.Tensor:
    """``outputs[g][j]`` (logits of mini-batch j of group g) as one ``(G, r, k, W)`` tensor,
    narrower logits padded with :data:`MASK_VALUE`."""
    width = max(out.shape[-1] for group in outputs for out in group)
    return torch.stack([torch.stack([
        out if out.shape[-1] == width else torch.cat(
            [out, out.new_full((*out.shape[:-1], width - out.shape[-1]), MASK_VALUE)], -1)
        for out in group]) for group in outputs])


def forward_groups(net: nn.Module, x: torch.Tensor, tasks: Sequence[int]) -> torch.Tensor:
    """The logits of ``x[g, j]`` through task ``tasks[g]``, for every group g and mini-batch
    j: ``(G, r, k, *input) → (G, r, k, W)``, equal to ``net(x[g, j], tasks[g])`` for each
    (up to floating-point reduction order; widths padded as :func:`stack_groups` pads).

    A network with a ``forward_groups`` method (a
    :class:`~pall_avalanche.models.TaskIncrementalNet`, a subnetwork network) computes them
    in one batched pass; any other runs them one by one.
    """
    if len(tasks) != len(x):
        raise ValueError(f"{len(tasks)} tasks for {len(x)} groups of inputs")
    own = getattr(net, "forward_groups", None)
    if own is not None:
        return own(x, tasks)
    return stack_groups([[net(batch, int(task)) for batch in group]
                         for group, task in zip(x, tasks, strict=True)])


def group_losses(criterion: nn.Module, logits: torch.Tensor, labels: torch.Tensor
                 ) -> torch.Tensor:
    """``criterion(logits[g], labels[g])`` for every group g of ``(G, n, W)`` logits and
    ``(G, n)`` labels, ``(G,)``: one vectorised cross-entropy for torch's plain
    ``CrossEntropyLoss`` (no class weights, no smoothing, a mean, no label ignored), a call
    per group otherwise."""
    plain = (type(criterion) is nn.CrossEntropyLoss and criterion.weight is None
             and criterion.label_smoothing == 0 and criterion.reduction == "mean"
             and criterion.ignore_index < 0)
    if plain:
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten(),
                               reduction="none").view(labels.shape).mean(1)
    return torch.stack([criterion(out, y) for out, y in zip(logits, labels, strict=True)])


def running_statistics(module: nn.Module) -> dict[str, nn.modules.batchnorm._NormBase]:
    """Name → norm layer with running statistics (BatchNorm's ``track_running_stats``)."""
    return {name: m for name, m in module.named_modules()
            if isinstance(m, nn.modules.batchnorm._NormBase) and m.track_running_stats}


def batchable(module: nn.Module) -> bool:
    """Whether :func:`vmap_backbone` can run ``module``: nothing in it is compiled (a
    compiled graph is traced for one plain batch), no module has a forward hook (a hook may
    keep the tensors it sees, which cannot leave ``vmap``), and no norm layer averages its
    running statistics cumulatively (``momentum=None`` reads its batch count on the host)."""
    modules = list(module.modules())
    return (all(getattr(m, "_compiled_call_impl", None) is None
                and not m._forward_hooks and not m._forward_pre_hooks for m in modules)
            and all(m.momentum is not None for m in running_statistics(module).values()))


@contextmanager
def _unfused_attention(module: nn.Module) -> Iterator[None]:
    """timm's attention layers take their unfused path (products, softmax, dropout of the
    attention weights): ``vmap`` has no batching rule for the fused kernel (it would run
    it once per mini-batch), and the kernel draws its dropout mask where ``vmap`` cannot
    give every mini-batch its own. Restored afterwards."""
    fused = [m for m in module.modules() if getattr(m, "fused_attn", False)]
    for m in fused:
        m.fused_attn = False
    try:
        yield
    finally:
        for m in fused:
            m.fused_attn = True


def vmap_backbone(backbone: nn.Module, x: torch.Tensor, *,
                  parameters: Mapping[str, torch.Tensor] | None = None,
                  statistics: Mapping[str, torch.Tensor] | None = None,
                  arguments: tuple = ()) -> torch.Tensor:
    """``backbone(x[g, j], *arguments)`` for every group g and mini-batch j, as one
    ``torch.func.vmap``: ``(G, r, k, *input) → (G, r, k, *output)``.

    :param parameters: parameters of ``backbone`` (its own names) substituted per group, each
        stacked over the G groups (a subnetwork's masked weights); the others are shared.
    :param statistics: the running statistics of its norm layers (its own names) substituted
        per group, stacked over the groups; what a train-mode pass adds to them is dropped.
        ``None``: its own statistics, which a train-mode pass updates as the G × r passes one
        after another would.
    :param arguments: further positional arguments of every call.
    """
    groups, repeats = x.shape[:2]
    layers = running_statistics(backbone)
    own = statistics is None and bool(layers) and backbone.training
    if statistics is not None:
        buffers = dict(statistics)
    elif own:
        buffers = {f"{name}.{kind}": getattr(layer, kind).expand(groups, *getattr(layer, kind)
                                                                  .shape)
                   for name, layer in layers.items() for kind in _STATISTICS}
    else:
        buffers = {}
    # every mini-batch updates a copy of its statistics of its own
    buffers = {name: value.unsqueeze(1).repeat(1, repeats, *([1] * (value.dim() - 1)))
               for name, value in buffers.items()}

    def one(batch: torch.Tensor, substituted: dict, copies: dict) -> torch.Tensor:
        return functional_call(backbone, {**substituted, **copies}, (batch, *arguments),
                               strict=False)

    with _unfused_attention(backbone):
        out = vmap(vmap(one, in_dims=(0, None, 0), randomness="different"),
                   randomness="different")(x, dict(parameters or {}), buffers)
    if own:
        _fold_running_statistics(layers, buffers, groups * repeats)
    return out


@torch.no_grad()
def _fold_running_statistics(layers: Mapping[str, nn.modules.batchnorm._NormBase],
                             copies: Mapping[str, torch.Tensor], n: int) -> None:
    """Give each norm layer the running statistics that ``n`` passes one after another
    would have left: pass i's copy holds ``(1 − m)·r₀ + m·s_i``, and the sequential update
    is ``(1 − m)ⁿ·r₀ + Σ_i (1 − m)^(n−1−i)·m·s_i`` (``m`` the layer's momentum)."""
    for name, layer in layers.items():
        decay = 1.0 - layer.momentum
        for kind in ("running_mean", "running_var"):
            start = getattr(layer, kind)
            steps = copies[f"{name}.{kind}"].flatten(0, 1) - decay * start
            weights = decay ** torch.arange(n - 1, -1, -1, device=start.device,
                                            dtype=start.dtype)
            start.mul_(decay ** n).add_((weights[:, None] * steps).sum(0))
        layer.num_batches_tracked.add_(n)
