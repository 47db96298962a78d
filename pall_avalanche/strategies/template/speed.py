"""The speed options of a strategy as one object (as Lightning's precision plugins): bfloat16
autocast of the training forward passes, channels-last memory layout, ``torch.compile`` of
the backbones and the batched, device-resident input path. None of them changes what is
computed beyond floating-point reduction order."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from pall_avalanche.data.device import DeviceBatchLoader, device_images_of
from pall_avalanche.models import backbones, compile_backbones
from pall_avalanche.options import AMP_MODES as _AMP
from pall_avalanche.options import INPUT_PIPELINES

__all__ = ["AMP_MODES", "INPUT_PIPELINES", "SpeedOptions"]

#: Mixed precision of the training forward passes: none, or bfloat16 autocast.
AMP_MODES = (None, *_AMP)


class SpeedOptions:
    """What makes a strategy fast, and nothing else.

    :param amp: ``"bf16"`` (bfloat16 autocast of the forward passes, float32 logits) or
        ``None``.
    :param channels_last: keep the model and 4-d inputs in channels-last layout.
    :param compile: ``torch.compile`` the model's backbones, in place, once.
    :param input_pipeline: ``"batched"``: a dataset carrying its images on the device is
        trained from batches drawn and augmented there; ``"per_sample"``: Avalanche's
        ``DataLoader`` always.
    :raises ValueError: an option outside its vocabulary.
    """

    def __init__(self, *, amp: str | None = None, channels_last: bool = False,
                 compile: bool = False, input_pipeline: str = "batched") -> None:
        if amp not in AMP_MODES:
            raise ValueError(f"amp={amp!r} is invalid; valid: {AMP_MODES}")
        if input_pipeline not in INPUT_PIPELINES:
            raise ValueError(f"input_pipeline={input_pipeline!r} is invalid; valid: "
                             f"{INPUT_PIPELINES}")
        self.amp = amp
        self.channels_last = bool(channels_last)
        self.compile = bool(compile)
        self.input_pipeline = input_pipeline

    def check_model(self, model: nn.Module) -> None:
        """Refuse ``compile`` for a model without a module named ``backbone``."""
        if self.compile and not backbones(model):
            raise ValueError(f"compile=True: model {type(model).__name__} has no module "
                             "named 'backbone' to compile (the built-in networks have one); "
                             "compile your model's feature layers yourself instead")

    @contextmanager
    def autocast(self, device: torch.device | str) -> Iterator[None]:
        """bfloat16 autocast on ``device`` with ``amp="bf16"``; nothing otherwise."""
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16,
                            enabled=self.amp == "bf16"):
            yield

    def prepare_model(self, model: nn.Module) -> None:
        """Channels-last layout and compiled backbones, as asked (in place)."""
        if self.channels_last:
            model.to(memory_format=torch.channels_last)
        if self.compile:
            compile_backbones(model)

    def prepare_inputs(self, mbatch: list) -> None:
        """A mini-batch's 4-d inputs in channels-last layout, as asked (in place)."""
        if self.channels_last and mbatch[0].dim() == 4:
            mbatch[0] = mbatch[0].contiguous(memory_format=torch.channels_last)

    def device_loader(self, dataset, batch_size: int, device, *, shuffle: bool,
                      drop_last: bool) -> DeviceBatchLoader | None:
        """The batched loader of ``dataset`` on ``device`` (its images are on the device and
        the batched path is on), or ``None`` for Avalanche's ``DataLoader``."""
        source = device_images_of(dataset)
        if self.input_pipeline == "per_sample" or source is None:
            return None
        return DeviceBatchLoader(source, batch_size, device, shuffle=shuffle,
                                 drop_last=drop_last)
