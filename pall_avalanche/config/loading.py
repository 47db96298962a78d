"""Configuration files: the shipped ones (:data:`CONFIG_DIR`), a benchmark's configuration
(:func:`for_benchmark`), YAML reading, ``--set KEY=VALUE`` overrides, one method's resolved
configuration and its hash."""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from importlib.resources import files
from pathlib import Path
from typing import Any

import yaml

from pall_avalanche.catalog import BENCHMARK_INFO, METHOD_INFO
from pall_avalanche.config.keys import CONFIG_KEYS, REQUIRED_KEYS, check_config

__all__ = ["CONFIG_DIR", "LOCATION_KEYS", "MAX_YAML_BYTES", "MAX_YAML_VALUES", "apply_overrides",
           "check_run_config", "config_hash", "for_benchmark", "load_config", "load_yaml_file",
           "parse_override", "resolve_method_config", "with_defaults"]

#: The largest YAML file read (a configuration or sweep file is a few kilobytes).
MAX_YAML_BYTES = 1 << 20
#: The most values a YAML document may hold once its aliases are expanded (a kilobyte of
#: nested aliases would otherwise stand for billions).
MAX_YAML_VALUES = 100_000

#: The shipped configuration files, ``<benchmark>.yaml`` (package data, so every script runs
#: from a non-editable install).
CONFIG_DIR = Path(str(files("pall_avalanche") / "configs"))


def load_yaml_file(path: Path, what: str) -> Any:
    """The YAML document of the file ``path``, read with bounds: at most
    :data:`MAX_YAML_BYTES`, UTF-8, valid YAML, at most :data:`MAX_YAML_VALUES` values with
    its aliases expanded and no alias inside itself.

    :param what: how a message names the file (``"--config x.yaml"``).
    :raises ValueError: one line naming ``what`` and the problem.
    """
    size = path.stat().st_size
    if size > MAX_YAML_BYTES:
        raise ValueError(f"{what}: {size} bytes; a YAML file here is at most {MAX_YAML_BYTES}")
    try:
        data = _load_yaml(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as err:
        raise ValueError(f"{what}: not UTF-8 text (byte {err.object[err.start]:#04x} at "
                         f"position {err.start})") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or type(err).__name__
        raise ValueError(f"{what}: not valid YAML{where} ({problem})") from None
    _count_values(data, what, {}, set())
    return data


def _count_values(value: Any, what: str, counted: dict[int, int], open_: set[int]) -> int:
    """How many values ``value`` holds with aliases expanded (a shared object counted at each
    place it appears, computed once).

    :raises ValueError: more than :data:`MAX_YAML_VALUES`, or an alias inside itself."""
    if not isinstance(value, (dict, list)):
        return 1
    key = id(value)
    if key in open_:
        raise ValueError(f"{what}: a YAML alias inside itself (a recursive value)")
    if key not in counted:
        open_.add(key)
        items = [*value.keys(), *value.values()] if isinstance(value, dict) else value
        counted[key] = 1 + sum(_count_values(item, what, counted, open_) for item in items)
        open_.discard(key)
    if counted[key] > MAX_YAML_VALUES:
        raise ValueError(f"{what}: more than {MAX_YAML_VALUES} values once its aliases are "
                         "expanded; a configuration holds a few hundred")
    return counted[key]


def load_config(path: str | Path) -> dict[str, Any]:
    """Read and check a YAML configuration file (:func:`load_yaml_file`,
    :func:`check_config`)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"configuration file {path} does not exist")
    data = load_yaml_file(path, f"--config {path}") or {}
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
    """The flat configuration of ``method``: the run keys (:data:`CONFIG_KEYS`) and the keys
    the method declares (:class:`~pall_avalanche.catalog.Method`), each at its default,
    updated by the configuration's value of it (``alpha: 0.1``: every method that declares
    ``alpha``), by the method's settings (a variant such as ``pall_strict``), then by
    ``methods[method]``. Keys only other methods declare are left out."""
    flat = {k: copy.deepcopy(v) for k, v in config.items()
            if k in CONFIG_KEYS and k not in ("methods", "seeds")}
    if method in METHOD_INFO:
        info = METHOD_INFO[method]
        flat.update({k: copy.deepcopy(config.get(k, key.default))
                     for k, key in info.keys.items()})
        flat.update(copy.deepcopy(dict(info.settings)))
    overrides = (config.get("methods") or {}).get(method) or {}
    if not isinstance(overrides, dict):
        raise ValueError(f"methods.{method} must be a mapping of overrides, got {overrides!r}")
    flat.update(copy.deepcopy(overrides))
    return flat


#: Keys that say where inputs are, not what is computed: they do not enter :func:`config_hash`.
LOCATION_KEYS = ("data_root",)


def config_hash(config: Mapping[str, Any]) -> str:
    """A short, stable hash of a resolved configuration (names result records); moving the
    data (:data:`LOCATION_KEYS`) keeps the records."""
    kept = {k: v for k, v in config.items() if k not in LOCATION_KEYS}
    text = json.dumps(kept, sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:10]


def for_benchmark(name: str, config_dir: Path = CONFIG_DIR) -> dict[str, Any]:
    """The configuration of benchmark ``name``, as ``--benchmark NAME`` starts from it (the one
    way to find a benchmark's configuration): ``<config_dir>/NAME.yaml`` for a shipped one;
    for a registered one (:func:`~pall_avalanche.catalog.register_benchmark`) the digits
    configuration with this benchmark and its default task count, updated by the
    configuration its registration gave (a mapping or a YAML file), if any."""
    if name not in BENCHMARK_INFO:
        raise ValueError(f"--benchmark {name}: unknown benchmark; valid: "
                         f"{', '.join(BENCHMARK_INFO)} (a plugin registers more: --plugin)")
    path = config_dir / f"{name}.yaml"
    if path.is_file():
        return load_config(path)
    info = BENCHMARK_INFO[name]
    own = info.config
    if isinstance(own, (str, Path)):
        own = load_config(own)
    config = {**load_config(config_dir / "digits.yaml"), "n_tasks": info.default_n_tasks,
              **dict(own or {}), "benchmark": name}
    check_config(config, f"the configuration of benchmark {name!r}")
    return config


def with_defaults(config: dict[str, Any], benchmark: str, config_dir: Path = CONFIG_DIR
                  ) -> dict[str, Any]:
    """A configuration file completed by the configuration of the benchmark it names
    (:func:`for_benchmark`; ``benchmark`` when it names none): every key it leaves out, and
    per method every key its ``methods`` entry leaves out (the file's values win)."""
    base = for_benchmark(config.get("benchmark", benchmark), config_dir)
    methods = {m: dict(v) for m, v in (base.get("methods") or {}).items()}
    for method, own in (config.get("methods") or {}).items():
        methods[method] = {**methods.get(method, {}), **own}
    return {**base, **config, **({"methods": methods} if methods else {})}


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
    missing = [k for k in REQUIRED_KEYS if k not in resolved]
    if missing:
        raise ValueError(f"the configuration of {method!r} lacks the keys {missing}")
    check_config(resolved, f"the configuration of {method!r}", method=method)
    clashing = [k for k in METHOD_INFO[method].keys if k in CONFIG_KEYS] \
        if method in METHOD_INFO else []
    if clashing:
        raise ValueError(f"method {method!r} declares {', '.join(clashing)}, which name run "
                         "keys (pall_avalanche.config.CONFIG_KEYS); rename them")
    for pair, run in ((("shadow_task", "shadow_seed"), "a shadow run"),
                      (("canary_task", "canaries"), "a canary run")):
        unset = [resolved.get(key) is None for key in pair]
        if unset[0] != unset[1]:
            raise ValueError(f"{pair[0]} and {pair[1]} go together: set both ({run} of the "
                             "exactness audit) or neither")
    if resolved.get("shadow_task") is not None and resolved.get("canary_task") is not None:
        raise ValueError(f"shadow_task={resolved['shadow_task']} and canary_task="
                         f"{resolved['canary_task']}: a run of the exactness audit is a shadow "
                         "run or a canary run, not both; set one pair")
    n_tasks, n_unlearn = resolved["n_tasks"], resolved["n_unlearn"]
    if n_unlearn > n_tasks:
        raise ValueError(f"n_unlearn={n_unlearn} is invalid for {method!r}: at most n_tasks="
                         f"{n_tasks} tasks can be unlearned")
    if resolved.get("unlearnable_age") == 0 and n_unlearn:
        raise ValueError(f"n_unlearn={n_unlearn} is invalid with unlearnable_age=0: every task "
                         "is learned permanently, none can be unlearned; set n_unlearn=0 or "
                         "unlearnable_age >= 1")
    spec = BENCHMARK_INFO[resolved["benchmark"]]
    classes = spec.n_classes
    if n_tasks not in spec.valid_n_tasks():
        raise ValueError(f"n_tasks={n_tasks} is invalid for benchmark "
                         f"{resolved['benchmark']!r}: its {classes} classes split evenly into "
                         f"{spec.valid_n_tasks()} tasks")
    for key in ("shadow_task", "canary_task"):
        if resolved.get(key) is not None and resolved[key] >= n_tasks:
            raise ValueError(f"{key}={resolved[key]} is invalid: the tasks are "
                             f"0..{n_tasks - 1}")
    per_class = classes // n_tasks
    buffer = resolved.get("buffer_size")
    takes_buffer = method in METHOD_INFO and "buffer_size" in METHOD_INFO[method].keys
    if takes_buffer and buffer is not None and buffer // n_tasks < per_class:
        raise ValueError(f"buffer_size={buffer} is invalid for {method!r}: it gives "
                         f"{buffer // n_tasks} samples per task over {n_tasks} tasks, fewer than "
                         f"the {per_class} classes of a task; use buffer_size >= "
                         f"{n_tasks * per_class}")
    return resolved
