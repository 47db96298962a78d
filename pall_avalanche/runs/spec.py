"""What a run is: :class:`RunSpec` (method, seed, resolved configuration, requests, training
seed), whose hash names the record's folder; :func:`seed_everything`; and what it ran on
(:func:`versions`, :func:`device_info`), stored with its record."""

from __future__ import annotations

import platform
import random
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import torch

from pall_avalanche.catalog import METHOD_INFO
from pall_avalanche.config import config_hash, resolve_method_config
from pall_avalanche.requests import Request, RequestSequence, generate_requests

__all__ = ["RunSpec", "device_info", "seed_everything", "versions"]


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (CPU and CUDA) random number generators."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@dataclass(frozen=True)
class RunSpec:
    """What a record is the result of: method, seed, resolved configuration, request
    sequence (``None``: the one the seed generates) and training seed (``None``: the seed).
    Its :attr:`hash` names its folder (:meth:`record_path`) and is stored in its record and
    checkpoints as ``config_hash``: the configuration's hash, with the requests and the
    training seed included when they are given explicitly (so a default run keeps the
    configuration's hash).

    Build one with :meth:`of`.
    """

    method: str
    seed: int
    config: Mapping[str, Any]
    requests: tuple[Request, ...] | None = None
    train_seed: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "config", MappingProxyType(dict(self.config)))

    def __reduce__(self) -> tuple:      # a mapping proxy does not pickle: rebuild from a dict
        return (type(self), (self.method, self.seed, dict(self.config), self.requests,
                             self.train_seed))

    def __hash__(self) -> int:          # equal specifications have equal identities
        return hash((self.method, self.seed, self.hash))

    @classmethod
    def of(cls, method: str, seed: int, config: Mapping[str, Any],
           requests: RequestSequence | Sequence | None = None,
           train_seed: int | None = None) -> RunSpec:
        """The specification of ``method`` with ``config`` (resolved for the method here).

        :param requests: a :class:`RequestSequence` or a list of requests or of
            ``{"kind", "task"}`` dicts; ``None``: generated from the seed.
        """
        if method not in METHOD_INFO:
            raise ValueError(f"unknown method {method!r}; valid methods are "
                             f"{sorted(METHOD_INFO)}")
        resolved = resolve_method_config(config, method)
        if requests is not None and not isinstance(requests, RequestSequence):
            requests = RequestSequence(requests, resolved["n_tasks"])
        return cls(method, seed, resolved, None if requests is None else tuple(requests),
                   train_seed)

    @property
    def sequence(self) -> RequestSequence:
        """The request sequence the run replays."""
        if self.requests is None:
            return generate_requests(self.config["n_tasks"], self.config["n_unlearn"],
                                     self.seed)
        return RequestSequence(self.requests, self.config["n_tasks"])

    def described(self) -> dict[str, Any]:
        """The resolved configuration, plus the replayed requests and the training seed when
        they are given: everything the record is the result of, besides method and seed."""
        out = dict(self.config)
        if self.requests is not None:
            out["requests"] = self.sequence.to_list()
        if self.train_seed is not None:
            out["train_seed"] = self.train_seed
        return out

    @property
    def hash(self) -> str:
        """The run's identity (class docstring)."""
        return config_hash(self.described())

    def identity(self) -> dict[str, Any]:
        """What a checkpoint must match to be resumed by this run."""
        return {"method": self.method, "seed": self.seed, "config_hash": self.hash,
                "requests": self.sequence.to_list(),
                **({"train_seed": self.train_seed} if self.train_seed is not None else {})}

    def record_path(self, out_dir: str | Path) -> Path:
        """``<out_dir>/<benchmark>/<method>/<hash>/seed<k>.json``."""
        return (Path(out_dir) / self.config["benchmark"] / self.method / self.hash
                / f"seed{self.seed}.json")


def versions() -> dict[str, str]:
    """Python, platform and the versions of the packages a record's numbers depend on."""
    out = {"python": sys.version.split()[0], "platform": platform.platform()}
    for dist in ("pall-avalanche", "torch", "torchvision", "avalanche-lib", "numpy", "timm"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def device_info(device: torch.device) -> dict[str, Any]:
    """The device a run trained on: the GPU's name, or the CPU model and torch's threads."""
    if device.type == "cuda":
        return {"type": "cuda", "name": torch.cuda.get_device_name(device)}
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"type": "cpu", "name": cpu, "threads": torch.get_num_threads()}
