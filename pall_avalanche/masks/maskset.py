"""Bit-packed sets of entries over named tensors (:class:`MaskSet`), checkpointed through
:func:`pall_avalanche.checkpoint.register_codec`."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np
import torch

from pall_avalanche.checkpoint import register_codec

__all__ = ["MaskSet"]


class MaskSet:
    """A set of entries over named tensors, stored bit-packed (1 bit per entry).

    :param shapes: name → shape of every tensor the set ranges over.
    :param packed: name → packed ``uint8`` tensor (``numpy.packbits`` of the flattened bools).
    """

    def __init__(self, shapes: Mapping[str, torch.Size], packed: Mapping[str, torch.Tensor]):
        self.shapes = dict(shapes)
        self.packed = dict(packed)

    @classmethod
    def from_bool(cls, masks: Mapping[str, torch.Tensor]) -> MaskSet:
        """Pack bool masks (tensor name → mask), 1 bit per entry."""
        packed = {name: torch.from_numpy(np.packbits(m.detach().reshape(-1).cpu().numpy()))
                  for name, m in masks.items()}
        return cls({n: m.shape for n, m in masks.items()}, packed)

    @classmethod
    def full(cls, shapes: Mapping[str, torch.Size]) -> MaskSet:
        """Every entry."""
        return cls.from_bool({n: torch.ones(s, dtype=torch.bool) for n, s in shapes.items()})

    @classmethod
    def empty(cls, shapes: Mapping[str, torch.Size]) -> MaskSet:
        """The mask set that keeps no entry of tensors of ``shapes``."""
        return cls(shapes, {n: torch.zeros((math.prod(s) + 7) // 8, dtype=torch.uint8)
                            for n, s in shapes.items()})

    def to_bool(self, name: str, device: torch.device | str = "cpu") -> torch.Tensor:
        """The bool mask of tensor ``name``, unpacked on ``device`` (the bits of each byte
        most significant first, as ``numpy.unpackbits``; nothing comes back to the host)."""
        shape = self.shapes[name]
        packed = self.packed[name].to(device)
        shifts = torch.arange(7, -1, -1, dtype=torch.uint8, device=packed.device)
        bits = packed.unsqueeze(1).bitwise_right_shift(shifts).bitwise_and_(1)
        return bits.view(torch.bool).reshape(-1)[:math.prod(shape)].reshape(shape)

    def bools(self, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
        """Every bool mask, unpacked on ``device`` (:meth:`to_bool`)."""
        return {name: self.to_bool(name, device) for name in self.shapes}

    def _combine(self, other: MaskSet, op) -> MaskSet:
        if other.shapes != self.shapes:
            raise ValueError("mask sets range over different tensors")
        return MaskSet(self.shapes, {n: op(p, other.packed[n]) for n, p in self.packed.items()})

    def __or__(self, other: MaskSet) -> MaskSet:
        return self._combine(other, torch.bitwise_or)

    def __and__(self, other: MaskSet) -> MaskSet:
        return self._combine(other, torch.bitwise_and)

    def __sub__(self, other: MaskSet) -> MaskSet:
        """Entries in ``self`` and not in ``other``."""
        return self._combine(other, lambda a, b: torch.bitwise_and(a, torch.bitwise_not(b)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MaskSet):
            return NotImplemented
        return self.shapes == other.shapes and all(
            torch.equal(p, other.packed[n]) for n, p in self.packed.items())

    def complement(self) -> MaskSet:
        """Every entry not in the set."""
        return MaskSet.from_bool({n: ~b for n, b in self.bools().items()})

    def count(self) -> int:
        """Number of entries in the set."""
        return sum(int(self.to_bool(n).sum()) for n in self.shapes)

    def n_entries(self) -> int:
        """Number of entries the set ranges over (its bit size)."""
        return sum(math.prod(s) for s in self.shapes.values())

    @staticmethod
    def union(sets: Iterable[MaskSet], shapes: Mapping[str, torch.Size]) -> MaskSet:
        """The bitwise OR of ``sets`` (the empty set of ``shapes`` when there are none)."""
        out = MaskSet.empty(shapes)
        for s in sets:
            out = out | s
        return out


# MaskSets in checkpoints: their shapes and packed bits (pall_avalanche.checkpoint)
register_codec(
    "mask_set", MaskSet,
    lambda m: {"shapes": {n: list(shape) for n, shape in m.shapes.items()},
               "packed": dict(m.packed)},
    lambda v: MaskSet({n: torch.Size(shape) for n, shape in v["shapes"].items()}, v["packed"]))

