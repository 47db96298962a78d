"""Run configurations: YAML files of hyper-parameters with command-line overrides.

A configuration is a flat mapping (benchmark, model, epochs, lr, ...) plus an optional
``methods`` section whose entries override global keys for one method (e.g. the paper's
learning rate 0.001 for ER on CIFAR). :func:`resolve_method_config` gives the flat, complete
configuration of one method; that is what a result record stores.

Every key is known (:data:`CONFIG_KEYS`: its type, range and meaning; a registered method's own
keys, :func:`method_keys`, for that method): an unknown key, a value of the wrong type or out of
range is refused with one line naming where it came from (the file,
``--set KEY=VALUE`` or a flag), the bad value and what is valid (:func:`check_setting`,
:func:`check_config`, :func:`check_run_config`), before anything is trained.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

import yaml

from pall_avalanche.catalog import BENCHMARK_INFO, METHOD_INFO, MODEL_INFO, SELECTION_NAMES

#: The shipped configuration files, ``<benchmark>.yaml`` (package data, so every script runs
#: from a non-editable install).
CONFIG_DIR = Path(str(files("pall_avalanche") / "configs"))
__all__ = [
    "AUTO_MIN_RUNS",
    "CONFIG_DIR",
    "CONFIG_KEYS",
    "INPUT_PIPELINES",
    "REQUIRED_KEYS",
    "THRESHOLD_METHODS",
    "KeySpec",
    "apply_overrides",
    "check_config",
    "check_run_config",
    "check_setting",
    "config_hash",
    "load_config",
    "method_keys",
    "parse_override",
    "resolve_method_config",
]

#: With ``jobs="auto"`` a worker process per core is started only when at least this many
#: records are missing: a worker costs seconds to start (it imports torch and Avalanche), a
#: digits record about one (:func:`pall_avalanche.runs.pool.resolve_jobs`).
AUTO_MIN_RUNS = 16

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
    """A name of a registry (:mod:`pall_avalanche.catalog`; looked up when a value is
    checked)."""
    def names() -> list[str]:
        if registry == "benchmark":
            return sorted(BENCHMARK_INFO)
        if registry == "model":
            return sorted(MODEL_INFO)
        return list(SELECTION_NAMES)

    class _Names:
        def __str__(self) -> str:
            return "one of " + ", ".join(names())

    return (lambda v: v in names()), _Names()


def _spec(kind: type, rule: tuple | None, meaning: str, *, nullable: bool = False) -> KeySpec:
    valid, what = rule if rule is not None else (None, "")
    return KeySpec(kind, valid, what, meaning, nullable)


#: How subnetwork methods may find a layer's mask threshold (the same masks every way; the
#: methods are described where they run, in :mod:`pall_avalanche.masks.selection`).
THRESHOLD_METHODS = ("auto", "partition", "topk", "sort", "kthvalue")
#: Where training mini-batches are assembled (``UnlearningTemplate``'s ``input_pipeline``).
INPUT_PIPELINES = ("batched", "per_sample")


#: Every configuration key (see :data:`CONFIG_DIR`), with its type, range and meaning.
CONFIG_KEYS: dict[str, KeySpec] = {
    "benchmark": _spec(str, _registered("benchmark"), "the benchmark"),
    "n_tasks": _spec(int, _at_least(1), "T, the number of tasks"),
    "model": _spec(str, _registered("model"), "the backbone"),
    "model_kwargs": _spec(dict, None, "keyword arguments of the backbone", nullable=True),
    "n_unlearn": _spec(int, _at_least(0), "N_u, unlearning requests per sequence"),
    "seeds": _spec(list, (lambda v: all(isinstance(s, int) and not isinstance(s, bool)
                                        and s >= 0 for s in v), "a list of integers >= 0"),
                   "the default seeds"),
    "data_root": _spec(str, None, "folder of the dataset files", nullable=True),
    "train_per_task": _spec(int, _at_least(1), "subsample of each task's training set",
                            nullable=True),
    "epochs": _spec(int, _at_least(1), "epochs per learning request"),
    "batch_size": _spec(int, _at_least(1), "training mini-batch size"),
    "eval_batch_size": _spec(int, _at_least(1), "evaluation batch size"),
    "optimizer": _spec(str, _choice("sgd", "adam"), "the optimizer"),
    "lr": _spec(float, _at_least(0, above=True), "learning rate"),
    "momentum": _spec(float, ((lambda v: 0 <= v < 1), "in [0, 1)"), "SGD momentum"),
    "weight_decay": _spec(float, _at_least(0), "weight decay"),
    "lr_schedule": _spec(str, _choice("constant", "cosine"), "learning-rate schedule"),
    "amp": _spec(str, _choice("bf16"), "mixed precision of the training forward passes",
                 nullable=True),
    "channels_last": _spec(bool, None, "channels-last memory layout"),
    "compile": _spec(bool, None, "torch.compile of the backbone (a speed option)"),
    "input_pipeline": _spec(str, _choice(*INPUT_PIPELINES), "where training "
                            "mini-batches are assembled: batched on the device where the "
                            "benchmark offers it, or per sample on the host", nullable=True),
    "mask_threshold": _spec(str, _choice(*THRESHOLD_METHODS),
                            "how subnetwork methods find per-layer mask thresholds (speed "
                            "only: the same masks)", nullable=True),
    "alpha": _spec(float, ((lambda v: 0 < v <= 1), "in (0, 1]"),
                   "α, per-layer connectivity of a task subnetwork (PALL, WSN)"),
    "n_retrain_iters": _spec(int, _at_least(0), "N_f, iterations after an unlearning request"),
    "beta": _spec(float, _at_least(0), "β, weight of the logit-MSE rehearsal term"),
    "buffer_size": _spec(int, _at_least(1), "total episodic memory"),
    "buffer_selection": _spec(str, _registered("selection"), "how buffer samples are chosen"),
    "strict_cascade": _spec(bool, None, "PALL's strict cascade option"),
    "retrain_tokens": _spec(bool, None, "PALL's retraining also trains the remaining tasks' "
                            "own tokens (a ViT's; the reference) or keeps them frozen"),
    "ewc_lambda": _spec(float, _at_least(0), "λ of EWC (also LSF's EWC term)"),
    "lwf_alpha": _spec(float, _at_least(0), "weight of LwF's distillation"),
    "lwf_temperature": _spec(float, _at_least(0, above=True), "LwF's temperature"),
    "lsf_gamma": _spec(float, _at_least(0), "γ of LSF's mnemonic-code terms"),
    "memory_strength": _spec(float, _at_least(0), "GEM's margin"),
    "retrain_epochs": _spec(int, _at_least(0), "ER (Retraining)'s epochs over the buffers"),
    "shadow_task": _spec(int, _at_least(0), "the exactness audit's shadow runs: the task "
                         "trained on a random half of its data", nullable=True),
    "shadow_seed": _spec(int, _at_least(0), "the exactness audit's shadow runs: picks that "
                         "half", nullable=True),
    "methods": _spec(dict, None, "per-method overrides: methods.<method>.<key>"),
}


def method_keys(method: str) -> dict[str, KeySpec]:
    """The own configuration keys of a registered method: the keys of its registered
    ``config`` that :data:`CONFIG_KEYS` does not know, each typed by its default and bounded by
    its ``ranges`` entry (:func:`~pall_avalanche.catalog.register_method`)."""
    info = METHOD_INFO.get(method)
    if info is None:
        return {}
    out = {}
    for key, default in info.config.items():
        if key in CONFIG_KEYS:
            continue
        low, high = info.ranges.get(key, (None, None))
        rule = None
        if low is not None or high is not None:
            what = ("in [" + ("-inf" if low is None else f"{low:g}") + ", "
                    + ("inf" if high is None else f"{high:g}") + "]")
            rule = ((lambda v, lo=low, hi=high: (lo is None or v >= lo)
                     and (hi is None or v <= hi)), what)
        out[key] = _spec(type(default), rule, f"{info.label}'s own key, default {default!r}")
    return out


def _key_spec(name: str, method: str | None, where: str) -> KeySpec:
    """The specification of configuration key ``name`` (of ``method``'s configuration, whose
    own keys count too)."""
    if name in CONFIG_KEYS:
        return CONFIG_KEYS[name]
    own = method_keys(method) if method is not None else {}
    if name in own:
        return own[name]
    owners = [m for m in METHOD_INFO if name in method_keys(m)]
    if owners:
        raise ValueError(f"{where}: {name!r} is an own key of method {owners[0]!r}; set it "
                         f"as methods.{owners[0]}.{name}=VALUE")
    raise _unknown(name, where, [*CONFIG_KEYS, *own])


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

    :param method: the method whose (resolved) configuration holds the key: its own keys
        (:func:`method_keys`) are known too; ``methods.<method>.<key>`` names the method itself.
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
    spec = _key_spec(name, method, where)
    if len(parts) > 1:
        if spec.kind is not dict:
            raise ValueError(f"{where}: {name} is not a mapping; set it as {name}=VALUE")
        return
    if not _type_ok(spec, value):
        kind = _KIND_NAMES[spec.kind] + (" or null" if spec.nullable else "")
        raise ValueError(f"{where}: {name} ({spec.meaning}) must be {kind}"
                         + (f" {spec.what}" if spec.what else "") + f", got {value!r}")
    if spec.valid is not None and value is not None and not spec.valid(value):
        raise ValueError(f"{where}: {name} ({spec.meaning}) must be {spec.what}, got {value!r}")
    if name == "methods":
        for method, overrides in value.items():
            check_setting(f"methods.{method}", overrides, where)


def check_config(config: Mapping[str, Any], where: str, *, method: str | None = None) -> None:
    """:func:`check_setting` for every key of ``config`` (a file's or a merged one; with
    ``method``, that method's resolved configuration)."""
    for key, value in config.items():
        check_setting(key, value, where, method=method)


def check_run_config(config: Mapping[str, Any], method: str,
                     overrides: Iterable[tuple[str, Any]] = ()) -> dict[str, Any]:
    """The resolved configuration of ``method`` (:func:`resolve_method_config`) after
    ``overrides`` (dotted keys, :func:`apply_overrides`), checked key by key and across keys
    (N_u ≤ T, the benchmark's classes split into T tasks): the one place a run's configuration
    is resolved and checked (:func:`pall_avalanche.runs.spec.plan`), before the first request
    of any run."""
    overrides = list(overrides)
    if overrides:
        config = apply_overrides(config, overrides)
    resolved = resolve_method_config(config, method)
    check_config(resolved, f"the configuration of {method!r}", method=method)
    lacking = [key for key in METHOD_INFO[method].params if key not in resolved] \
        if method in METHOD_INFO else []
    if lacking:
        raise ValueError(f"the configuration of {method!r} lacks {', '.join(lacking)}, which "
                         "the method takes; set it (e.g. --set KEY=VALUE)")
    shadow = [resolved.get(key) is None for key in ("shadow_task", "shadow_seed")]
    if shadow[0] != shadow[1]:
        raise ValueError("shadow_task and shadow_seed go together: set both (a shadow run of "
                         "the exactness audit) or neither")
    n_tasks, n_unlearn = resolved["n_tasks"], resolved["n_unlearn"]
    if n_unlearn > n_tasks:
        raise ValueError(f"n_unlearn={n_unlearn} is invalid for {method!r}: at most n_tasks="
                         f"{n_tasks} tasks can be unlearned")
    spec = BENCHMARK_INFO[resolved["benchmark"]]
    classes = spec.n_classes
    if n_tasks not in spec.valid_n_tasks():
        raise ValueError(f"n_tasks={n_tasks} is invalid for benchmark "
                         f"{resolved['benchmark']!r}: its {classes} classes split evenly into "
                         f"{spec.valid_n_tasks()} tasks")
    if resolved.get("shadow_task") is not None and resolved["shadow_task"] >= n_tasks:
        raise ValueError(f"shadow_task={resolved['shadow_task']} is invalid: the tasks are "
                         f"0..{n_tasks - 1}")
    per_class = classes // n_tasks
    buffer = resolved.get("buffer_size")
    takes_buffer = method in METHOD_INFO and "buffer_size" in METHOD_INFO[method].params
    if takes_buffer and buffer is not None and buffer // n_tasks < per_class:
        raise ValueError(f"buffer_size={buffer} is invalid for {method!r}: it gives "
                         f"{buffer // n_tasks} samples per task over {n_tasks} tasks, fewer than "
                         f"the {per_class} classes of a task; use buffer_size >= "
                         f"{n_tasks * per_class}")
    return resolved


def load_config(path: str | Path) -> dict[str, Any]:
    """Read and check a YAML configuration file (:func:`check_config`)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"configuration file {path} does not exist")
    try:
        data = _load_yaml(path.read_text()) or {}
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or type(err).__name__
        raise ValueError(f"--config {path}: not valid YAML{where} ({problem})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a configuration must be a mapping, got {type(data).__name__}")
    check_config(data, str(path))
    return data


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, reading ``1e-3`` as a number as YAML 1.2 does (YAML 1.1, which
    PyYAML follows, wants ``1.0e-3`` and reads ``1e-3`` as a string)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


def _load_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)  # a SafeLoader subclass: plain data only


def parse_override(text: str) -> tuple[str, Any]:
    """``"key=value"`` → (key, value), the value parsed as YAML (``0.1`` and ``1e-3`` → float,
    ``null`` → None, ``[1, 2]`` → list). Dotted keys reach nested entries:
    ``methods.er.lr=0.001``."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ValueError(f"override {text!r} is not of the form KEY=VALUE")
    return key.strip(), _load_yaml(value)


def apply_overrides(config: Mapping[str, Any], overrides: Iterable[tuple[str, Any]]
                    ) -> dict[str, Any]:
    """A copy of ``config`` with each (dotted key, value) set."""
    out = copy.deepcopy(dict(config))
    for key, value in overrides:
        *parents, leaf = key.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ValueError(f"cannot set {key!r}: {part!r} is not a mapping")
        node[leaf] = value
    return out


def resolve_method_config(config: Mapping[str, Any], method: str) -> dict[str, Any]:
    """The flat configuration of ``method``: global keys, updated by the values a registered
    variant sets (``MethodInfo.config``, e.g. ``pall_strict``), then by ``methods[method]``."""
    flat = {k: copy.deepcopy(v) for k, v in config.items() if k not in ("methods", "seeds")}
    if method in METHOD_INFO:
        flat.update(copy.deepcopy(dict(METHOD_INFO[method].config)))
    overrides = (config.get("methods") or {}).get(method) or {}
    if not isinstance(overrides, dict):
        raise ValueError(f"methods.{method} must be a mapping of overrides, got {overrides!r}")
    flat.update(copy.deepcopy(overrides))
    missing = [k for k in REQUIRED_KEYS if k not in flat]
    if missing:
        raise ValueError(f"the configuration of {method!r} lacks the keys {missing}")
    return flat


#: Keys that say where inputs are, not what is computed: they do not enter :func:`config_hash`.
LOCATION_KEYS = ("data_root",)


def config_hash(config: Mapping[str, Any]) -> str:
    """A short, stable hash of a resolved configuration (names result records); moving the
    data (:data:`LOCATION_KEYS`) keeps the records."""
    kept = {k: v for k, v in config.items() if k not in LOCATION_KEYS}
    text = json.dumps(kept, sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:10]
