"""CIFAR ResNet-18/34 (docs/fidelity.md, "Models"): 3x3 stride-1 stem, no max-pool,
BasicBlocks, bias-free convolutions, and BatchNorm **without affine parameters or running
statistics** (batch statistics in train and eval), so nothing can leak across tasks through
normalisation."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["cifar_resnet", "resnet18", "resnet34"]

BLOCKS = {18: (2, 2, 2, 2), 34: (3, 4, 6, 3)}
WIDTHS = (64, 128, 256, 512)


def _norm(channels: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(channels, affine=False, track_running_stats=False)


class BasicBlock(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, stride=stride, padding=1, bias=False)
        self.bn1 = _norm(out_ch)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, padding=1, bias=False)
        self.bn2 = _norm(out_ch)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_ch != out_ch:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_ch, out_ch, 1, stride=stride, bias=False), _norm(out_ch)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class CifarResNet(nn.Module):
    def __init__(self, depth: int, in_channels: int = 3) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, WIDTHS[0], 3, padding=1, bias=False)
        self.bn1 = _norm(WIDTHS[0])
        stages, in_ch = [], WIDTHS[0]
        for i, (n_blocks, width) in enumerate(zip(BLOCKS[depth], WIDTHS, strict=True)):
            for b in range(n_blocks):
                stages.append(BasicBlock(in_ch, width, 2 if (i > 0 and b == 0) else 1))
                in_ch = width
        self.layers = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.flatten(self.pool(self.layers(out)), 1)


def cifar_resnet(input_shape: tuple[int, ...], depth: int = 18) -> tuple[nn.Module, int]:
    """ResNet-18 (``depth=18``) or ResNet-34 backbone; returns (backbone, 512)."""
    if depth not in BLOCKS:
        raise ValueError(f"depth={depth} is not supported; valid depths are {sorted(BLOCKS)}")
    return CifarResNet(depth, in_channels=input_shape[0]), WIDTHS[-1]


def resnet18(input_shape: tuple[int, ...]) -> tuple[nn.Module, int]:
    """The CIFAR ResNet-18 backbone (:func:`cifar_resnet`)."""
    return cifar_resnet(input_shape, depth=18)


def resnet34(input_shape: tuple[int, ...]) -> tuple[nn.Module, int]:
    """The CIFAR ResNet-34 backbone (:func:`cifar_resnet`)."""
    return cifar_resnet(input_shape, depth=34)
