"""The run's configuration keys with their type, range and meaning (:data:`CONFIG_KEYS`; a
method's own keys are in its declaration, :class:`~pall_avalanche.catalog.Method`), and the
one-line checks of a setting, a configuration and a method's resolved configuration."""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pall_avalanche.catalog import BENCHMARK_INFO, METHOD_INFO, MODEL_INFO
from pall_avalanche.options import (
    AMP_MODES,
    INPUT_PIPELINES,
    LR_SCHEDULES,
    OPTIMIZERS,
)

__all__ = ["AUTO_MIN_RUNS", "CONFIG_KEYS", "CPU_RUN_THREADS", "MAX_SEED", "REQUIRED_KEYS",
           "KeySpec", "check_config", "check_setting", "method_keys"]

#: The largest seed (2^31 − 1: NumPy's legacy seeding takes up to 2^32 − 1, and the audit adds
#: offsets of a few hundred thousand to a seed).
MAX_SEED = 2**31 - 1

#: torch's intra-op threads for every run that trains on the CPU, in this process or in a
#: worker (:func:`pall_avalanche.runs.pool.run_threads`). A record depends on them (a matrix
#: product sums in another order with another number of threads), so one number for every
#: layout makes a record the same for any ``jobs``; and one thread is the fast layout for the
#: harness's CPU runs. Measured on 2 cores (Intel Xeon) with ``benchmarks/table1.py --epochs 2
#: --seeds 0`` (13 runs in this process): 15.0 s with one thread and 15.0 s with two on a quiet
#: machine, 15.9 s against 104.9 s with another process keeping one core busy (two threads
#: wait for each other on a shared core).
CPU_RUN_THREADS = 1

#: With ``jobs="auto"`` a worker process per core is started only when at least this many
#: records are missing: a worker costs seconds to start (it imports torch and Avalanche), a
#: digits record about one (:func:`pall_avalanche.runs.pool.resolve_jobs`).
AUTO_MIN_RUNS = 16

#: The keys every configuration must have once its benchmark's defaults are filled in.
REQUIRED_KEYS = (
    "benchmark", "n_tasks", "model", "n_unlearn", "epochs", "batch_size", "eval_batch_size",
    "optimizer", "lr", "momentum", "weight_decay", "lr_schedule",
)


@dataclass(frozen=True)
class KeySpec:
    """A configuration key: what values it takes and what it means.

    :param kind: ``int``, ``float``, ``str``, ``bool``, ``dict`` or ``list``.
    :param valid: a test of the value (after the type check), or ``None``.
    :param what: the valid values, as the error message says them.
    :param meaning: one line for users.
    :param nullable: ``None`` is a valid value.
    """

    kind: type
    valid: Callable[[Any], bool] | None
    what: str
    meaning: str
    nullable: bool = False


def _choice(*options: str) -> tuple[Callable[[Any], bool], str]:
    return (lambda v: v in options), "one of " + ", ".join(options)


def _at_least(low: float, *, above: bool = False) -> tuple[Callable[[Any], bool], str]:
    return ((lambda v: math.isfinite(v) and (v > low if above else v >= low)),
            f"{'>' if above else '>='} {low:g}")


def _registered(registry: str) -> tuple[Callable[[Any], bool], str]:
    """A name of a registry, ``"benchmark"`` or ``"model"`` (:mod:`pall_avalanche.catalog`;
    looked up when a value is checked)."""
    def names() -> list[str]:
        return sorted(BENCHMARK_INFO if registry == "benchmark" else MODEL_INFO)

    class _Names:
        def __str__(self) -> str:
            return "one of " + ", ".join(names())

    return (lambda v: v in names()), _Names()


def _spec(kind: type, rule: tuple | None, meaning: str, *, nullable: bool = False) -> KeySpec:
    valid, what = rule if rule is not None else (None, "")
    return KeySpec(kind, valid, what, meaning, nullable)




#: Every key of a run's configuration (see :data:`~pall_avalanche.config.CONFIG_DIR`) that is
#: not a method's own, with its type, range and meaning.
CONFIG_KEYS: dict[str, KeySpec] = {
    "benchmark": _spec(str, _registered("benchmark"), "the benchmark"),
    "n_tasks": _spec(int, _at_least(1), "T, the number of tasks"),
    "model": _spec(str, _registered("model"), "the backbone"),
    "model_kwargs": _spec(dict, None, "keyword arguments of the backbone", nullable=True),
    "n_unlearn": _spec(int, _at_least(0), "N_u, unlearning requests per sequence"),
    "unlearnable_age": _spec(int, _at_least(0), "the CLPU protocol (CLArena's): a task can be "
                             "unlearned until this many tasks were learned after it, then "
                             "becomes permanent (never to be unlearned); 0: every task is "
                             "learned permanently; unset: every task stays unlearnable",
                             nullable=True),
    "seeds": _spec(list, (lambda v: bool(v) and len(set(v)) == len(v) and all(
                              isinstance(s, int) and not isinstance(s, bool) and 0 <= s <= MAX_SEED
                              for s in v),
                          f"a non-empty list of distinct integers from 0 to {MAX_SEED}"),
                   "the default seeds"),
    "data_root": _spec(str, None, "folder of the dataset files", nullable=True),
    "train_per_task": _spec(int, _at_least(1), "subsample of each task's training set",
                            nullable=True),
    "epochs": _spec(int, _at_least(1), "epochs per learning request"),
    "batch_size": _spec(int, _at_least(1), "training mini-batch size"),
    "eval_batch_size": _spec(int, _at_least(1), "evaluation batch size"),
    "optimizer": _spec(str, _choice(*OPTIMIZERS), "the optimizer"),
    "lr": _spec(float, _at_least(0, above=True), "learning rate"),
    "momentum": _spec(float, ((lambda v: 0 <= v < 1), "in [0, 1)"), "SGD momentum"),
    "weight_decay": _spec(float, _at_least(0), "weight decay"),
    "lr_schedule": _spec(str, _choice(*LR_SCHEDULES), "learning-rate schedule"),
    "amp": _spec(str, _choice(*AMP_MODES), "mixed precision of the training forward passes",
                 nullable=True),
    "channels_last": _spec(bool, None, "channels-last memory layout"),
    "compile": _spec(bool, None, "torch.compile of the backbone (a speed option)"),
    "tf32": _spec(bool, None, "TensorFloat-32 matrix products and convolutions on a GPU "
                  "(default true; no effect on the CPU)"),
    "deterministic": _spec(bool, None, "deterministic algorithms only (torch's "
                           "use_deterministic_algorithms, cuBLAS's fixed workspace): a GPU "
                           "run then repeats bit for bit, or stops naming the operation "
                           "that has no deterministic kernel (default false)"),
    "input_pipeline": _spec(str, _choice(*INPUT_PIPELINES), "where training "
                            "mini-batches are assembled: batched on the device where the "
                            "benchmark offers it, or per sample on the host", nullable=True),
    "shadow_task": _spec(int, _at_least(0), "the exactness audit's shadow runs: the task "
                         "trained on a random half of its data", nullable=True),
    "shadow_seed": _spec(int, _at_least(0), "the exactness audit's shadow runs: picks that "
                         "half", nullable=True),
    "canary_task": _spec(int, _at_least(0), "the exactness audit's canary runs: the task "
                         "whose training set the canaries join", nullable=True),
    "canaries": _spec(int, _at_least(2), "the exactness audit's canary runs: how many "
                      "canaries, each included with probability 1/2", nullable=True),
    "methods": _spec(dict, None, "per-method overrides: methods.<method>.<key>"),
}


def method_keys(method: str) -> dict[str, KeySpec]:
    """The keys a registered method declares (:class:`~pall_avalanche.catalog.Method`), as
    specifications; ``{}`` for an unknown method."""
    info = METHOD_INFO.get(method)
    if info is None:
        return {}
    return {name: KeySpec(key.kind, lambda v, key=key: key.problem(v) is None, key.bounds,
                          key.meaning, key.nullable)
            for name, key in info.keys.items()}


def _owners(name: str) -> list[str]:
    """The registered methods that declare the key ``name``."""
    return [m for m, info in METHOD_INFO.items() if name in info.keys]


def _key_specs(name: str, method: str | None, where: str) -> list[KeySpec]:
    """The specifications a value of key ``name`` must meet: a run key's; a key of
    ``method``'s; without a method, the key of every method that declares it (a
    configuration's top-level value is every such method's).

    :raises ValueError: nobody knows the key, or ``method`` does not take it.
    """
    if name in CONFIG_KEYS:
        return [CONFIG_KEYS[name]]
    if method is not None:
        own = method_keys(method)
        if name in own:
            return [own[name]]
        owners = _owners(name)
        if owners:
            more = f" and {len(owners) - 3} more" if len(owners) > 3 else ""
            raise ValueError(f"{where}: method {method!r} takes no key {name!r} (methods "
                             f"that do: {', '.join(owners[:3])}{more}); its keys: "
                             f"{', '.join(own) or 'none'}")
        raise _unknown(name, where, [*CONFIG_KEYS, *own])
    owners = _owners(name)
    if not owners:
        raise _unknown(name, where, [*CONFIG_KEYS, *{k for info in METHOD_INFO.values()
                                                      for k in info.keys}])
    return [method_keys(m)[name] for m in owners]


def _type_ok(spec: KeySpec, value: Any) -> bool:
    if value is None:
        return spec.nullable
    if spec.kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if spec.kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, spec.kind)


_KIND_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false",
               dict: "a mapping", list: "a list"}


def _unknown(key: str, where: str, known: Iterable[str]) -> ValueError:
    known = sorted(known)
    close = difflib.get_close_matches(key, known, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return ValueError(f"{where}: unknown configuration key {key!r}; {hint}known keys: "
                      f"{', '.join(known)}")


def check_setting(key: str, value: Any, where: str, *, method: str | None = None) -> None:
    """Refuse an unknown (dotted) ``key`` or a bad ``value`` in one line that starts with
    ``where`` (``--set alpha=abc``, a file name, ``--epochs 0``).

    :param method: the method whose (resolved) configuration holds the key: the keys it
        declares (:func:`method_keys`) are known, other methods' are not;
        ``methods.<method>.<key>`` names the method itself. Without one, a key some method
        declares is checked against every declaration of it.
    :raises ValueError: naming the key, the value and what is valid.
    """
    parts = key.split(".")
    if parts[0] == "methods" and len(parts) > 1:
        if parts[1] not in METHOD_INFO:
            close = difflib.get_close_matches(parts[1], list(METHOD_INFO), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ValueError(f"{where}: unknown method {parts[1]!r} in {key!r}; {hint}valid "
                             f"methods: {', '.join(METHOD_INFO)}")
        if len(parts) == 2:
            if not isinstance(value, dict):
                raise ValueError(f"{where}: {key} must be a mapping of configuration keys, got "
                                 f"{value!r}")
            for sub, item in value.items():
                check_setting(f"{key}.{sub}", item, where)
            return
        method = parts[1]
        parts = parts[2:]
        if parts[0] in ("methods", "seeds"):
            raise ValueError(f"{where}: {parts[0]!r} cannot be set per method")
    name = parts[0]
    # a method key set for every method that declares it must suit one of them (each run
    # checks its own method's value before it starts)
    problems = [_problem(spec, name, parts, value, where)
                for spec in _key_specs(name, method, where)]
    if all(problems):
        raise problems[0]
    if name == "methods":
        for method, overrides in value.items():
            check_setting(f"methods.{method}", overrides, where)


def _problem(spec: KeySpec, name: str, parts: Sequence[str], value: Any, where: str
             ) -> ValueError | None:
    """What is wrong with ``value`` for the key ``name`` of ``spec`` (``parts``: the dotted
    key's parts from ``name`` on), or ``None``."""
    if len(parts) > 1:
        return None if spec.kind is dict else ValueError(
            f"{where}: {name} is not a mapping; set it as {name}=VALUE")
    if not _type_ok(spec, value):
        kind = _KIND_NAMES[spec.kind] + (" or null" if spec.nullable else "")
        return ValueError(f"{where}: {name} ({spec.meaning}) must be {kind}"
                          + (f" {spec.what}" if spec.what else "") + f", got {value!r}")
    if spec.valid is not None and value is not None and not spec.valid(value):
        return ValueError(f"{where}: {name} ({spec.meaning}) must be {spec.what}, got "
                          f"{value!r}")
    return None


def check_config(config: Mapping[str, Any], where: str, *, method: str | None = None) -> None:
    """:func:`check_setting` for every key of ``config`` (a file's or a merged one; with
    ``method``, that method's resolved configuration)."""
    for key, value in config.items():
        check_setting(key, value, where, method=method)
