"""Run configurations: YAML files of hyper-parameters with command-line overrides.

A configuration is a flat mapping (benchmark, model, epochs, lr, ...) plus an optional
``methods`` section whose entries override global keys for one method (e.g. the paper's
learning rate 0.001 for ER on CIFAR). :func:`resolve_method_config` gives the flat, complete
configuration of one method; that is what a result record stores.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "REQUIRED_KEYS",
    "apply_overrides",
    "config_hash",
    "load_config",
    "parse_override",
    "resolve_method_config",
]

REQUIRED_KEYS = (
    "benchmark", "n_tasks", "model", "n_unlearn", "epochs", "batch_size", "eval_batch_size",
    "optimizer", "lr", "momentum", "weight_decay", "lr_schedule",
)


def load_config(path: str | Path) -> dict[str, Any]:
    """Read a YAML configuration file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"configuration file {path} does not exist")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a configuration must be a mapping, got {type(data).__name__}")
    return data


def parse_override(text: str) -> tuple[str, Any]:
    """``"key=value"`` → (key, value), the value parsed as YAML (``0.1`` → float, ``null`` →
    None, ``[1, 2]`` → list). Dotted keys reach nested entries: ``methods.er.lr=0.001``."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ValueError(f"override {text!r} is not of the form KEY=VALUE")
    return key.strip(), yaml.safe_load(value)


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
    variant sets (``MethodSpec.config``, e.g. ``pall_strict``), then by ``methods[method]``."""
    from pall_avalanche.strategies import METHODS  # late: the strategies import this module

    flat = {k: copy.deepcopy(v) for k, v in config.items() if k not in ("methods", "seeds")}
    if method in METHODS:
        flat.update(copy.deepcopy(dict(METHODS[method].config)))
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
