"""What a run is: :class:`RunSpec` (method, seed, resolved configuration, requests, training
seed, the code it runs), whose hash names the record's folder, and :func:`plan`, the one place
where a configuration is resolved and checked for its runs. Imports no torch (refusals stay
fast)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pall_avalanche.catalog import BENCHMARK_INFO, METHOD_INFO, MODEL_INFO
from pall_avalanche.config import check_run_config, config_hash
from pall_avalanche.requests import Request, RequestSequence, generate_requests
from pall_avalanche.runs.fingerprint import code_fingerprint

__all__ = ["RunSpec", "plan", "probe_modules"]


@dataclass(frozen=True)
class RunSpec:
    """What a record is the result of: method, seed, resolved configuration, request
    sequence (``None``: the one the seed generates), training seed (``None``: the seed) and
    code (``code``, computed when the spec is made: the fingerprint,
    :func:`~pall_avalanche.runs.fingerprint.code_fingerprint`, of this package's modules the
    run imports from the method's strategy, the model's and the benchmark's modules and
    ``modules``, those of a probe riding along). Its :attr:`hash` names its folder
    (:meth:`record_path`) and is stored in its record and checkpoints as ``config_hash``: the
    hash of the configuration, with the requests and the training seed when they are given
    explicitly, and the code. A record written by other code is not reused.

    Build one with :meth:`of`.
    """

    method: str
    seed: int
    config: Mapping[str, Any]
    requests: tuple[Request, ...] | None = None
    train_seed: int | None = None
    modules: tuple[str, ...] = ()
    code: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "config", MappingProxyType(dict(self.config)))
        if not self.code:   # fixed when the run is planned, carried to the worker that runs it
            entries = (METHOD_INFO.get(self.method), MODEL_INFO.get(self.config.get("model")),
                       BENCHMARK_INFO.get(self.config.get("benchmark")))
            found = {info.where.partition(":")[0] for info in entries if info is not None}
            object.__setattr__(self, "code",
                               code_fingerprint(tuple(sorted(found | set(self.modules)))))

    def __reduce__(self) -> tuple:      # a mapping proxy does not pickle: rebuild from a dict
        return (type(self), (self.method, self.seed, dict(self.config), self.requests,
                             self.train_seed, self.modules, self.code))

    def __hash__(self) -> int:          # equal specifications have equal identities
        return hash((self.method, self.seed, self.hash))

    @classmethod
    def of(cls, method: str, seed: int, config: Mapping[str, Any],
           requests: RequestSequence | Sequence | None = None,
           train_seed: int | None = None, modules: Sequence[str] = ()) -> RunSpec:
        """The checked specification of one run (:func:`plan` for one method and seed).

        :param requests: a :class:`RequestSequence` or a list of requests or of
            ``{"kind", "task"}`` dicts; ``None``: generated from the seed.
        :param modules: as :func:`plan`'s.
        """
        offset = None if train_seed is None else train_seed - seed
        return plan([method], [seed], config, requests=requests, train_seed_offset=offset,
                    modules=modules)[0]

    @property
    def sequence(self) -> RequestSequence:
        """The request sequence the run replays."""
        if self.requests is None:
            return generate_requests(self.config["n_tasks"], self.config["n_unlearn"],
                                     self.seed, self.config.get("unlearnable_age"))
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
        return config_hash({**self.described(), "code": self.code})

    def identity(self) -> dict[str, Any]:
        """What a checkpoint must match to be resumed by this run."""
        return {"method": self.method, "seed": self.seed, "config_hash": self.hash,
                "requests": self.sequence.to_list(),
                **({"train_seed": self.train_seed} if self.train_seed is not None else {})}

    def record_path(self, out_dir: str | Path) -> Path:
        """``<out_dir>/<benchmark>/<method>/<hash>/seed<k>.json``."""
        return (Path(out_dir) / self.config["benchmark"] / self.method / self.hash
                / f"seed{self.seed}.json")


def probe_modules(probe: Callable[[], Any] | None) -> tuple[str, ...]:
    """The module of a probe factory (a class, a function, or a ``functools.partial`` of one):
    its code is part of the records it rides along (:attr:`RunSpec.code`)."""
    if probe is None:
        return ()
    return (getattr(probe, "func", probe).__module__,)


def plan(methods: Sequence[str], seeds: Sequence[int], config: Mapping[str, Any], *,
         overrides: Sequence[tuple[str, Any]] = (),
         requests: RequestSequence | Sequence | None = None,
         train_seed_offset: int | None = None, modules: Sequence[str] = ()) -> list[RunSpec]:
    """The specifications of every (method, seed), in that order: ``config`` with
    ``overrides`` resolved and checked once per method
    (:func:`~pall_avalanche.config.check_run_config`), the requests checked against it. The
    entry of the ``runs`` package: every module below it receives these frozen, checked
    specifications.

    :param methods: registered method names.
    :param seeds: the seeds.
    :param config: a full configuration (global keys plus optional ``methods`` section).
    :param overrides: (dotted key, value) pairs set on ``config`` first (a grid point's).
    :param requests: replay this sequence for every seed (``None``: generated per seed).
    :param train_seed_offset: train seed ``s`` with training seed ``s + offset``
        (``None``: the seed itself).
    :param modules: the modules of a probe riding along the runs (part of their code,
        :attr:`RunSpec.code`).
    :raises ValueError: an unknown method, a bad configuration or request sequence.
    """
    specs = []
    for method in methods:
        if method not in METHOD_INFO:
            raise ValueError(f"unknown method {method!r}; valid methods are "
                             f"{sorted(METHOD_INFO)}")
        resolved = check_run_config(config, method, overrides)
        sequence = None if requests is None else tuple(
            RequestSequence(list(requests), resolved["n_tasks"]))
        specs += [RunSpec(method, seed, resolved, sequence,
                          None if train_seed_offset is None else seed + train_seed_offset,
                          tuple(modules))
                  for seed in seeds]
    return specs
