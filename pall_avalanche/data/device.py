"""Device-resident training inputs for the image benchmarks.

A task's training images stay one ``uint8`` tensor (:class:`DeviceImages`), moved to the
training device once; every mini-batch is drawn by index, augmented as a batch and normalised
there (:class:`BatchPipeline`), so the host never assembles a batch sample by sample. The
strategy still receives the Avalanche experience: the task's dataset carries its
:class:`DeviceImages` as the attribute ``device_images`` (kept by Avalanche's ``train()`` /
``eval()`` views), and :meth:`~pall_avalanche.strategies.UnlearningTemplate.make_train_dataloader`
iterates a :class:`DeviceBatchLoader` instead of a ``DataLoader`` when it finds one. The
dataset's own per-sample transforms still serve everything else (replay buffers, evaluation,
a user's code), and a dataset without ``device_images`` (digits, a user's benchmark) trains
through the per-sample path as before.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch

from pall_avalanche.data.augment import CropFlip, ResizedCropFlip, normalize

__all__ = ["BatchPipeline", "DeviceBatchLoader", "DeviceImages", "device_images_of"]


@dataclass(frozen=True)
class BatchPipeline:
    """A training augmentation applied to a batch of ``uint8`` images on their device, then
    the normalisation of the per-sample path (the same values bit for bit).

    :param augment: :class:`~pall_avalanche.data.augment.CropFlip` (CIFAR) or
        :class:`~pall_avalanche.data.augment.ResizedCropFlip` (Tiny ImageNet).
    :param mean: per-channel mean of the normalisation.
    :param std: per-channel standard deviation.
    """

    augment: CropFlip | ResizedCropFlip
    mean: tuple[float, ...]
    std: tuple[float, ...]
    #: device → (mean, std) as ``(C, 1, 1)`` float32 tensors there, made once.
    _statistics: dict = field(default_factory=dict, compare=False, repr=False)

    def statistics(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, std) on ``device``, copied there once (not per batch: a copy from the host
        waits for a GPU)."""
        key = str(device)
        if key not in self._statistics:
            self._statistics[key] = tuple(
                torch.tensor(values, dtype=torch.float32, device=device).view(-1, 1, 1)
                for values in (self.mean, self.std))
        return self._statistics[key]

    def __call__(self, images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Augmented, normalised float32 inputs of a ``uint8`` batch (random draws from
        ``generator``, which lives on the images' device)."""
        return normalize(self.augment(images, generator), *self.statistics(images.device))


@dataclass
class DeviceImages:
    """One task's training images as a single ``uint8`` tensor, its labels and its task label,
    with the :class:`BatchPipeline` that turns a batch of them into training inputs.

    :param images: ``(N, C, H, W)`` uint8 (the tensor the task's dataset holds; not copied).
    :param targets: ``(N,)`` int64 task-local labels.
    :param task: the task label.
    :param pipeline: the batch augmentation and normalisation.
    """

    images: torch.Tensor
    targets: torch.Tensor
    task: int
    pipeline: BatchPipeline
    _on: dict = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        return len(self.targets)

    def on(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """(images, targets) on ``device``, moved there once and kept until
        :meth:`release` (or a move to another device, which drops the previous copy)."""
        key = str(device)
        if key not in self._on:
            self._on.clear()
            self._on[key] = (self.images.to(device), self.targets.to(device))
        return self._on[key]

    def release(self) -> None:
        """Drop the device copy (the task is learned; :meth:`on` moves it again if needed)."""
        self._on.clear()

    def subset(self, indices: Sequence[int]) -> DeviceImages:
        """The images at ``indices`` (as Avalanche's ``subset`` of the task's dataset)."""
        index = torch.as_tensor(list(indices), dtype=torch.long)
        return DeviceImages(self.images[index], self.targets[index], self.task, self.pipeline)


def device_images_of(dataset) -> DeviceImages | None:
    """The :class:`DeviceImages` an Avalanche dataset carries, or ``None``."""
    return getattr(dataset, "device_images", None)


class DeviceBatchLoader:
    """Mini-batches ``[x, y, t]`` of a :class:`DeviceImages`, drawn and augmented on
    ``device``: what Avalanche's training loop iterates in place of a ``DataLoader``.

    Every pass (epoch) draws one seed from torch's default CPU generator (where a
    ``DataLoader`` draws its seeds too) and seeds a generator on the device with it; the
    order (a permutation when ``shuffle``) and every augmentation come from that generator,
    so a seeded run repeats and an evaluation in between (which restores the default
    generator) changes nothing. No step hands a value to the host.

    :param source: the task's images.
    :param batch_size: the mini-batch size (the last batch is smaller unless ``drop_last``).
    :param device: the training device.
    :param shuffle: a random order per pass (else the stored order).
    :param drop_last: leave out a last, smaller batch.
    """

    def __init__(self, source: DeviceImages, batch_size: int, device: torch.device | str, *,
                 shuffle: bool = True, drop_last: bool = False) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size} must be >= 1")
        self.source = source
        self.batch_size = batch_size
        self.device = torch.device(device)
        self.shuffle = shuffle
        self.drop_last = drop_last

    def __len__(self) -> int:
        n = len(self.source)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def __iter__(self) -> Iterator[list[torch.Tensor]]:
        """A pass: the seed, the device copy and the order are set up here, the batches are
        made as they are asked for."""
        seed = int(torch.empty((), dtype=torch.int64).random_())      # a CPU tensor
        generator = torch.Generator(self.device).manual_seed(seed)
        images, targets = self.source.on(self.device)
        self.source.pipeline.statistics(self.device)              # copied before the steps
        n = len(targets)
        order = (torch.randperm(n, generator=generator, device=self.device) if self.shuffle
                 else torch.arange(n, device=self.device))
        return self._batches(images, targets, order, generator)

    def _batches(self, images: torch.Tensor, targets: torch.Tensor, order: torch.Tensor,
                 generator: torch.Generator) -> Iterator[list[torch.Tensor]]:
        for batch in range(len(self)):
            index = order[batch * self.batch_size:(batch + 1) * self.batch_size]
            x = self.source.pipeline(images[index], generator)
            yield [x, targets[index], torch.full_like(index, self.source.task)]
