"""Bit-packed sets of entries over named tensors (:class:`MaskSet`), checkpointed through
:func:`pall_avalanche.checkpoint.register_codec`."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import torch

from pall_avalanche.checkpoint import register_codec

__all__ = ["MaskSet"]


def _pack(bools: torch.Tensor) -> torch.Tensor:
    """The flattened ``bools`` packed 8 to a byte, most significant bit first (the bytes of
    ``numpy.packbits``), on their own device."""
    flat = bools.detach().reshape(-1)
    padding = -len(flat) % 8
    if padding:
        flat = torch.cat([flat, flat.new_zeros(padding)])
    shifts = torch.arange(7, -1, -1, dtype=torch.uint8, device=flat.device)
    return (flat.view(-1, 8).to(torch.uint8) << shifts).sum(1, dtype=torch.uint8)


class MaskSet:
    """A set of entries over named tensors, stored bit-packed (1 bit per entry).

    A mask set lives on one device, the device of its packed bits: one built from bool masks
    lives where they are (a network's masks, on the network's device), an empty or full one
    where it is asked to, and set algebra keeps the device of its operands (which must share
    one, as torch's operations require).

    :param shapes: name → shape of every tensor the set ranges over.
    :param packed: name → packed ``uint8`` tensor (the bytes ``numpy.packbits`` gives of the
        flattened bools).
    """

    def __init__(self, shapes: Mapping[str, torch.Size], packed: Mapping[str, torch.Tensor]):
        self.shapes = dict(shapes)
        self.packed = dict(packed)

    @property
    def device(self) -> torch.device:
        """Where the packed bits are (the CPU for a set over no tensor)."""
        return next(iter(self.packed.values())).device if self.packed else torch.device("cpu")

    def to(self, device: torch.device | str) -> MaskSet:
        """The same set with its packed bits on ``device`` (``self`` when they are there)."""
        if self.device == torch.device(device):
            return self
        return MaskSet(self.shapes, {n: p.to(device) for n, p in self.packed.items()})

    @classmethod
    def from_bool(cls, masks: Mapping[str, torch.Tensor]) -> MaskSet:
        """Pack bool masks (tensor name → mask), 1 bit per entry, on their device (nothing
        comes back to the host)."""
        return cls({n: m.shape for n, m in masks.items()},
                   {name: _pack(m) for name, m in masks.items()})

    @classmethod
    def full(cls, shapes: Mapping[str, torch.Size], device: torch.device | str = "cpu"
             ) -> MaskSet:
        """Every entry, on ``device``."""
        return cls(shapes, {n: torch.full(((math.prod(s) + 7) // 8,), 255, dtype=torch.uint8,
                                          device=device) for n, s in shapes.items()}
                   )._clear_padding()

    @classmethod
    def empty(cls, shapes: Mapping[str, torch.Size], device: torch.device | str = "cpu"
              ) -> MaskSet:
        """The mask set that keeps no entry of tensors of ``shapes``, on ``device``."""
        return cls(shapes, {n: torch.zeros((math.prod(s) + 7) // 8, dtype=torch.uint8,
                                           device=device) for n, s in shapes.items()})

    def _clear_padding(self) -> MaskSet:
        """The set with the padding bits past each tensor's last entry cleared (as
        :meth:`from_bool` leaves them), so equal sets have equal bytes."""
        packed = {}
        for name, bits in self.packed.items():
            spare = -math.prod(self.shapes[name]) % 8
            if spare:
                bits = bits.clone()
                bits[-1:].bitwise_and_(256 - (1 << spare))
            packed[name] = bits
        return MaskSet(self.shapes, packed)

    def to_bool(self, name: str, device: torch.device | str | None = None) -> torch.Tensor:
        """The bool mask of tensor ``name``, unpacked on ``device`` (default: the set's own;
        the bits of each byte most significant first, as ``numpy.unpackbits``; nothing comes
        back to the host)."""
        shape = self.shapes[name]
        packed = self.packed[name] if device is None else self.packed[name].to(device)
        shifts = torch.arange(7, -1, -1, dtype=torch.uint8, device=packed.device)
        bits = packed.unsqueeze(1).bitwise_right_shift(shifts).bitwise_and_(1)
        return bits.view(torch.bool).reshape(-1)[:math.prod(shape)].reshape(shape)

    def bools(self, device: torch.device | str | None = None) -> dict[str, torch.Tensor]:
        """Every bool mask, unpacked on ``device`` (default: the set's own; :meth:`to_bool`)."""
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
        """Every entry not in the set (on its device)."""
        return MaskSet(self.shapes, {n: torch.bitwise_not(p) for n, p in self.packed.items()}
                       )._clear_padding()

    def count(self) -> int:
        """Number of entries in the set."""
        return sum(int(self.to_bool(n).sum()) for n in self.shapes)

    def n_entries(self) -> int:
        """Number of entries the set ranges over (its bit size)."""
        return sum(math.prod(s) for s in self.shapes.values())

    @staticmethod
    def union(sets: Iterable[MaskSet], shapes: Mapping[str, torch.Size],
              device: torch.device | str = "cpu") -> MaskSet:
        """The bitwise OR of ``sets`` (on their device; the empty set of ``shapes`` on
        ``device`` when there are none)."""
        out = None
        for s in sets:
            out = s if out is None else out | s
        return MaskSet.empty(shapes, device) if out is None else out


# MaskSets in checkpoints: their shapes and packed bits (pall_avalanche.checkpoint)
register_codec(
    "mask_set", MaskSet,
    lambda m: {"shapes": {n: list(shape) for n, shape in m.shapes.items()},
               "packed": dict(m.packed)},
    lambda v: MaskSet({n: torch.Size(shape) for n, shape in v["shapes"].items()}, v["packed"]))

