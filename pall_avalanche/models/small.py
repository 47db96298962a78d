"""Small backbones for the embedded digits benchmark (8x8 grey images)."""

from __future__ import annotations

import math

from torch import nn

__all__ = ["digits_cnn", "mlp"]


def mlp(input_shape: tuple[int, ...], hidden: tuple[int, ...] = (256, 256)
        ) -> tuple[nn.Module, int]:
    """Flatten → [Linear → ReLU] per hidden width. Returns (backbone, feature width)."""
    layers: list[nn.Module] = [nn.Flatten()]
    width = math.prod(input_shape)
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    return nn.Sequential(*layers), width


def digits_cnn(input_shape: tuple[int, ...], channels: tuple[int, int] = (16, 32)
               ) -> tuple[nn.Module, int]:
    """Two 3x3 convolutions (ReLU, the second with stride 2) and global average pooling."""
    c1, c2 = channels
    backbone = nn.Sequential(
        nn.Conv2d(input_shape[0], c1, 3, padding=1), nn.ReLU(),
        nn.Conv2d(c1, c2, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(),
    )
    return backbone, c2
