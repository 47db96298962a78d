"""ViT-T/8 for S-TinyImageNet (docs/fidelity.md, "Models"), built from timm's ``PatchEmbed``
and ``Block``.

8×8 patches (convolution with bias) → 64 tokens + CLS, width 192, 12 pre-LN blocks with 3
heads, MLP 768 with GELU; Q/K/V and output projections without bias, MLP with bias; LayerNorm
(eps 1e-6) without affine parameters; dropout 0.1 on the embeddings, the residual branches,
the MLP and the attention probabilities; the CLS output is the feature vector (the bias-free
head is :class:`~pall_avalanche.models.TaskIncrementalNet`'s). 5,408,064 parameters with a
200-unit head.

Q, K and V come from timm's fused projection ``attn.qkv`` (one ``Linear(192, 576)``, weight
rows ``[0:192] = W_Q``, ``[192:384] = W_K``, ``[384:576] = W_V``). The subnetwork methods mask
it per slice: each of W_Q, W_K, W_V is selected as its own layer (its own top-k at α, its own
share or pruning count), as the paper's reference masks them as separate layers
(:func:`~pall_avalanche.masks.selection_slices`, docs/fidelity.md).

With ``token_sets=T`` every task has its own CLS token and positional embedding (12,672
parameters per task), as the subnetwork methods use them: they are not masked; the task being
learned trains its own, and unlearning re-sets them (CLS token to zeros, positional embedding
re-drawn) (:meth:`VisionTransformer.task_parameters`,
:meth:`VisionTransformer.reset_task_parameters_`).
"""

from __future__ import annotations

from functools import partial

import torch
from timm.layers import PatchEmbed
from timm.models.vision_transformer import Attention, Block
from torch import nn

__all__ = ["VisionTransformer", "vit_t8"]

TOKEN_STD = 0.02


class _AttentionWithoutOutputBias(Attention):
    """timm's attention with a bias-free output projection (``Block``'s ``proj_bias`` also
    sets the MLP's biases, and those stay)."""

    def __init__(self, dim: int, **kwargs) -> None:
        super().__init__(dim, **{**kwargs, "proj_bias": False})


class VisionTransformer(nn.Module):
    """A task-aware pre-LN vision transformer returning the final CLS features.

    :param image_size: input height = width.
    :param in_channels: input channels.
    :param patch_size: side of the square patches.
    :param width: token width.
    :param depth: number of transformer blocks.
    :param heads: attention heads per block.
    :param mlp_dim: hidden width of each block's MLP.
    :param dropout: dropout probability everywhere dropout is applied.
    :param token_sets: 1 = one CLS token and positional embedding shared by all tasks;
        T = one set per task, selected by the task label.
    """

    task_aware = True

    def __init__(self, *, image_size: int, in_channels: int, patch_size: int = 8,
                 width: int = 192, depth: int = 12, heads: int = 3, mlp_dim: int = 768,
                 dropout: float = 0.1, token_sets: int = 1) -> None:
        super().__init__()
        if image_size % patch_size:
            raise ValueError(f"image_size={image_size} is not a multiple of "
                             f"patch_size={patch_size}")
        if token_sets < 1:
            raise ValueError(f"token_sets={token_sets} must be >= 1")
        norm = partial(nn.LayerNorm, eps=1e-6, elementwise_affine=False)
        self.patch_embed = PatchEmbed(img_size=image_size, patch_size=patch_size,
                                      in_chans=in_channels, embed_dim=width, bias=True)
        n_tokens = self.patch_embed.num_patches + 1
        self.cls_tokens = nn.ParameterList(
            nn.Parameter(torch.empty(1, 1, width)) for _ in range(token_sets))
        self.pos_embeds = nn.ParameterList(
            nn.Parameter(torch.empty(1, n_tokens, width)) for _ in range(token_sets))
        self.embed_drop = nn.Dropout(dropout)
        self.blocks = nn.Sequential(*(
            Block(width, heads, mlp_ratio=mlp_dim / width, qkv_bias=False, proj_bias=True,
                  proj_drop=dropout, attn_drop=dropout, norm_layer=norm,
                  attn_layer=_AttentionWithoutOutputBias)
            for _ in range(depth)))
        self.norm = norm(width)
        self.token_sets = token_sets
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Re-draw every token set (the layers re-draw their own parameters; see
        :func:`~pall_avalanche.models.init.reinitialize_`)."""
        for task in range(self.token_sets):
            self.reset_task_parameters_(task)

    def _set(self, task: int) -> int:
        return task if self.token_sets > 1 else 0

    def task_parameters(self, task: int) -> list[nn.Parameter]:
        """The parameters only ``task`` uses: its CLS token and positional embedding when
        every task has its own, else none."""
        if self.token_sets == 1:
            return []
        return [self.cls_tokens[task], self.pos_embeds[task]]

    @torch.no_grad()
    def reset_task_parameters_(self, task: int) -> None:
        """Re-set ``task``'s CLS token to zeros and re-draw its positional embedding
        (truncated normal, std 0.02), as the paper's reference initialises them."""
        self.cls_tokens[self._set(task)].zero_()
        nn.init.trunc_normal_(self.pos_embeds[self._set(task)], std=TOKEN_STD,
                              a=-2 * TOKEN_STD, b=2 * TOKEN_STD)

    def _tokens(self, task_labels: torch.Tensor | int, batch: int
                ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.token_sets == 1 or isinstance(task_labels, int):
            task = self._set(task_labels if isinstance(task_labels, int) else 0)
            return (self.cls_tokens[task].expand(batch, -1, -1), self.pos_embeds[task])
        sets = task_labels.tolist()
        return (torch.cat([self.cls_tokens[t] for t in sets]),
                torch.cat([self.pos_embeds[t] for t in sets]))

    def forward(self, x: torch.Tensor, task_labels: torch.Tensor | int) -> torch.Tensor:
        patches = self.patch_embed(x)
        cls, pos = self._tokens(task_labels, len(x))
        tokens = self.embed_drop(torch.cat([cls, patches], dim=1) + pos)
        return self.norm(self.blocks(tokens))[:, 0]


def vit_t8(input_shape: tuple[int, ...], token_sets: int = 1, **kwargs
           ) -> tuple[nn.Module, int]:
    """ViT-T/8 (keyword arguments override the architecture, e.g. ``depth=2`` for tests);
    returns (backbone, width)."""
    channels, height, width = input_shape
    if height != width:
        raise ValueError(f"input_shape={input_shape}: ViT needs square images")
    backbone = VisionTransformer(image_size=height, in_channels=channels,
                                 token_sets=token_sets, **kwargs)
    return backbone, backbone.norm.normalized_shape[0]
