"""Device-resident inputs: a task's data as one tensor, batched on the device.

A task's inputs stay one tensor (:class:`DeviceImages`: the image benchmarks' ``uint8``
images, or inputs used as they are, such as digits' standardised pixels), moved to the
device once; every mini-batch is drawn by index and, for images, augmented as a batch and
normalised there (:class:`BatchPipeline`), so the host never assembles a batch sample by
sample. The strategy still receives the Avalanche experience: the task's dataset carries its
:class:`DeviceImages` as the attribute ``device_images`` (kept by Avalanche's ``train()`` /
``eval()`` views):

- training: :meth:`~pall_avalanche.strategies.UnlearningTemplate.make_train_dataloader`
  iterates a :class:`DeviceBatchLoader` instead of a ``DataLoader`` when it finds one (the
  same order as Avalanche's loader on CPU: :class:`DeviceBatchLoader`);
- evaluation, learning checks and a buffer's pass over a task without augmentation:
  :meth:`DeviceImages.eval_batches`, the evaluation view (normalisation only), in order, the
  same values as the per-sample evaluation transform.

The dataset's own per-sample transforms still serve everything else (augmented buffer draws, a
user's code), and a dataset without ``device_images`` (a user's benchmark) goes through the
per-sample path.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch

from pall_avalanche.data.augment import CropFlip, ResizedCropFlip, normalize

__all__ = ["BatchPipeline", "DeviceBatchLoader", "DeviceImages", "IDENTITY", "device_images_of"]


@dataclass(frozen=True)
class BatchPipeline:
    """What turns a batch of stored inputs into model inputs on their device: a training
    augmentation (or none), then the normalisation of the per-sample path (the same values
    bit for bit), or nothing for inputs stored ready to use (:data:`IDENTITY`).

    :param augment: :class:`~pall_avalanche.data.augment.CropFlip` (CIFAR),
        :class:`~pall_avalanche.data.augment.ResizedCropFlip` (Tiny ImageNet) or ``None``.
    :param mean: per-channel mean of the normalisation of ``uint8`` images (``None``: the
        inputs are used as stored).
    :param std: per-channel standard deviation.
    """

    augment: CropFlip | ResizedCropFlip | None
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    #: device → (mean, std) as ``(C, 1, 1)`` float32 tensors there, made once.
    _statistics: dict = field(default_factory=dict, compare=False, repr=False)

    def statistics(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(mean, std) on ``device``, copied there once (not per batch: a copy from the host
        waits for a GPU); ``None`` without a normalisation."""
        if self.mean is None:
            return None
        key = str(device)
        if key not in self._statistics:
            self._statistics[key] = tuple(
                torch.tensor(values, dtype=torch.float32, device=device).view(-1, 1, 1)
                for values in (self.mean, self.std))
        return self._statistics[key]

    def evaluation(self, inputs: torch.Tensor) -> torch.Tensor:
        """The evaluation view of a batch: normalised (or as stored)."""
        statistics = self.statistics(inputs.device)
        return inputs if statistics is None else normalize(inputs, *statistics)

    def __call__(self, inputs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Training inputs of a batch: augmented (random draws from ``generator``, which lives
        on the inputs' device), then normalised."""
        if self.augment is not None:
            inputs = self.augment(inputs, generator)
        return self.evaluation(inputs)


#: The pipeline of inputs stored ready to use (no augmentation, no normalisation).
IDENTITY = BatchPipeline(None)


@dataclass
class DeviceImages:
    """One task's inputs as a single tensor (``uint8`` images, or inputs used as stored), its
    labels and its task label, with the :class:`BatchPipeline` that turns a batch of them into
    model inputs.

    :param images: ``(N, ...)`` inputs (the tensor the task's dataset holds; not copied).
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

    @property
    def augmented(self) -> bool:
        """Whether training draws random augmentations of the inputs."""
        return self.pipeline.augment is not None

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

    def eval_batches(self, batch_size: int, device: torch.device | str
                     ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """``(x, y)`` batches of ``batch_size`` in stored order, ``x`` the evaluation view
        (:meth:`BatchPipeline.evaluation`) on ``device``: what an unshuffled ``DataLoader`` of
        the dataset's evaluation view gives, batch for batch. Draws no random number."""
        images, targets = self.on(torch.device(device))
        for start in range(0, len(targets), batch_size):
            yield (self.pipeline.evaluation(images[start:start + batch_size]),
                   targets[start:start + batch_size])

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

    Every pass (epoch) draws from torch's default CPU generator what Avalanche's training
    ``DataLoader`` draws there: the loader's base seed (unused here) and, when shuffling, the
    random sampler's seed, whose CPU generator gives the order (``randperm``), so the order is
    the ``DataLoader``'s, sample for sample; augmentations come from a generator on the device
    seeded from that CPU generator. A seeded run repeats, an evaluation in between (which
    restores the default generator) changes nothing, and no step hands a value to the host.

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
        """A pass: the seeds, the device copy and the order are set up here, the batches are
        made as they are asked for."""
        base = _draw_seed()                        # a DataLoader iterator's base seed
        cpu = torch.Generator().manual_seed(_draw_seed() if self.shuffle else base)
        images, targets = self.source.on(self.device)
        self.source.pipeline.statistics(self.device)              # copied before the steps
        n = len(targets)
        order = (torch.randperm(n, generator=cpu) if self.shuffle else torch.arange(n))
        generator = torch.Generator(self.device).manual_seed(
            int(torch.randint(2**62, (), generator=cpu)))
        return self._batches(images, targets, order.to(self.device), generator)

    def _batches(self, images: torch.Tensor, targets: torch.Tensor, order: torch.Tensor,
                 generator: torch.Generator) -> Iterator[list[torch.Tensor]]:
        for batch in range(len(self)):
            index = order[batch * self.batch_size:(batch + 1) * self.batch_size]
            x = self.source.pipeline(images[index], generator)
            yield [x, targets[index], torch.full_like(index, self.source.task)]


def _draw_seed() -> int:
    """A seed drawn from torch's default CPU generator, as a ``DataLoader`` draws its seeds
    (a CPU tensor: no device is waited for)."""
    return int(torch.empty((), dtype=torch.int64).random_())
