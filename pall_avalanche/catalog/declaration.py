"""A method's declaration: its registered name, strategy, label, exactness, Table 1 size symbol
and hyper-parameters (:class:`Key`: type, default, range and meaning). A built-in method
declares itself next to its strategy class (the module's ``DECLARATIONS`` tuple); the catalog reads
the built-in declarations from a generated manifest (:mod:`pall_avalanche.catalog.manifest`),
so nothing here imports torch or Avalanche. Everything else a method needs is derived from its
declaration: the configuration checks and the configuration reference, the command line's
dedicated flags, ``check_method``'s keys row and the strategy's keyword arguments.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = ["KEY_TYPES", "Key", "Method"]

#: The types a method's hyper-parameter may have.
KEY_TYPES = (bool, int, float, str)
_KIND_NAMES = {"bool": bool, "int": int, "float": float, "str": str}


@dataclass(frozen=True)
class Key:
    """One hyper-parameter of a method: the strategy's keyword argument of that name.

    :param default: its value unless a configuration sets it (``None`` only with
        ``nullable``).
    :param meaning: one line for users (the configuration reference, ``--help``, messages).
    :param kind: ``bool``, ``int``, ``float`` or ``str``; by default the default's type.
    :param low: the smallest valid number, or ``None``.
    :param high: the largest valid number, or ``None``.
    :param low_open: ``low`` itself is not valid (``> low``).
    :param choices: the valid strings, or empty for any.
    :param nullable: ``None`` is valid.
    :param flag: the command line has a dedicated flag for it (``--n-retrain-iters`` for
        ``n_retrain_iters``): a key that sweeps vary.
    """

    default: Any
    meaning: str
    kind: type | None = None
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    choices: tuple[str, ...] = ()
    nullable: bool = False
    flag: bool = False

    def __post_init__(self) -> None:
        if self.kind is None:
            if self.default is None:
                raise ValueError("a key whose default is None needs its kind")
            object.__setattr__(self, "kind", type(self.default))
        if self.kind not in KEY_TYPES:
            raise ValueError(f"a key's kind must be one of bool, int, float, str; got "
                             f"{self.kind!r} (default {self.default!r})")
        if (self.low is not None or self.high is not None) and self.kind not in (int, float):
            raise ValueError(f"bounds need a numeric key; this one is {self.kind.__name__}")
        if self.choices and self.kind is not str:
            raise ValueError("choices need a str key")
        problem = self.problem(self.default)
        if problem:
            raise ValueError(f"default {self.default!r}: {problem}")

    @property
    def bounds(self) -> str:
        """The valid values of the key's kind in words (``in (0, 1]``, ``one of a, b``; empty
        for any)."""
        if self.choices:
            return "one of " + ", ".join(self.choices)
        if self.low is not None and self.high is not None:
            return f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}]"
        if self.low is not None:
            return f"{'>' if self.low_open else '>='} {self.low:g}"
        if self.high is not None:
            return f"<= {self.high:g}"
        return ""

    @property
    def what(self) -> str:
        """The valid values in words (``a number in (0, 1]``)."""
        kinds = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
        text = self.bounds if self.choices else f"{kinds[self.kind]} {self.bounds}".strip()
        return text + (" or null" if self.nullable else "")

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is invalid for this key (``must be a number > 0``), or ``None``."""
        if value is None:
            return None if self.nullable else f"must be {self.what}"
        if isinstance(value, bool) != (self.kind is bool) or not (
                isinstance(value, (int, float)) if self.kind is float
                else isinstance(value, self.kind)):
            return f"must be {self.what}"
        if self.choices and value not in self.choices:
            return f"must be {self.what}"
        if self.kind in (int, float):
            if not math.isfinite(value):
                return f"must be {self.what}"
            if self.low is not None and (value < self.low or (self.low_open
                                                              and value == self.low)):
                return f"must be {self.what}"
            if self.high is not None and value > self.high:
                return f"must be {self.what}"
        return None

    def to_json(self) -> dict[str, Any]:
        """The key as the manifest stores it (:meth:`from_json` reads it back)."""
        out: dict[str, Any] = {"default": self.default, "meaning": self.meaning,
                               "kind": self.kind.__name__}
        for name in ("low", "high"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        for name in ("low_open", "nullable", "flag"):
            if getattr(self, name):
                out[name] = True
        if self.choices:
            out["choices"] = list(self.choices)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Key:
        """A key from its manifest entry (:meth:`to_json`)."""
        fields = dict(data)
        fields["kind"] = _KIND_NAMES[fields["kind"]]
        fields["choices"] = tuple(fields.get("choices", ()))
        return cls(**fields)


def _import_path(strategy: Any) -> Any:
    """A strategy class's import path ``"module:Class"`` (a string is kept as it is)."""
    if isinstance(strategy, str):
        return strategy
    return f"{strategy.__module__}:{strategy.__qualname__}"


@dataclass(frozen=True)
class Method:
    """A method's declaration: what registering it (:func:`~pall_avalanche.catalog.
    register_method`) makes known.

    :param name: the command-line name (letters, digits, underscores).
    :param strategy: its strategy class (an
        :class:`~pall_avalanche.strategies.UnlearningTemplate` subclass) or its import path
        ``"package.module:Class"``. It is called as ``Strategy(model=..., optimizer=...,
        train_mb_size=..., train_epochs=..., eval_mb_size=..., device=..., plugins=...,
        evaluator=..., lr_schedule=..., amp=..., channels_last=..., input_pipeline=...,
        compile=..., <one keyword argument per key>)``.
    :param exact: whether its unlearning is exact (Table 1 prints A_u as "Exact"; the contract
        check :mod:`pall_avalanche.check_method` holds it to that).
    :param label: the name printed in tables (default: ``name``).
    :param keys: its hyper-parameters, name → :class:`Key`. A configuration sets one for
        every method that declares it (``alpha: 0.1``) or for one method
        (``methods.pall.alpha: 0.1``); a key no configuration sets takes its default.
    :param size: Table 1's symbolic model size
        (:data:`~pall_avalanche.catalog.MODEL_SIZES`); ``None``: the strategy class's
        ``table_size`` when it is given as a class, else ``d``.
    :param settings: the values that make the method a variant of another (``pall_beta0``:
        ``{"beta": 0.0}``, :meth:`variant`): they win over a configuration's values for every
        method (``beta: 0.5``); only ``methods.<name>.<key>`` changes them.
    :raises ValueError: a setting of a key it does not declare, or an invalid value.
    """

    name: str
    strategy: Any
    exact: bool
    label: str = ""
    keys: Mapping[str, Key] = field(default_factory=dict)
    size: str | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "label", self.label or self.name)
        object.__setattr__(self, "keys", dict(self.keys))
        object.__setattr__(self, "settings", dict(self.settings))
        if self.size is None:
            size = "d" if isinstance(self.strategy, str) else getattr(self.strategy,
                                                                       "table_size", "d")
            object.__setattr__(self, "size", size)
        for key, value in self.settings.items():
            if key not in self.keys:
                raise ValueError(f"method {self.name!r}: settings[{key!r}] names no key of "
                                 f"the method; its keys: {', '.join(self.keys) or 'none'}")
            problem = self.keys[key].problem(value)
            if problem:
                raise ValueError(f"method {self.name!r}: settings[{key!r}] = {value!r} "
                                 f"{problem}")

    def values(self) -> dict[str, Any]:
        """Its keys' values when a configuration sets none: the defaults, then the
        settings."""
        return {**{k: key.default for k, key in self.keys.items()}, **self.settings}

    @property
    def where(self) -> str:
        """Where the strategy's code is: its import path."""
        return _import_path(self.strategy)

    def variant(self, name: str, label: str, **settings: Any) -> Method:
        """The same strategy and keys under another name, with ``settings`` (``pall_beta0``:
        PALL with β = 0 whatever the configuration's β)."""
        return replace(self, name=name, label=label, settings={**self.settings, **settings})

    def to_json(self) -> dict[str, Any]:
        """The declaration as the manifest stores it."""
        out = {"name": self.name, "strategy": self.where, "exact": self.exact,
               "label": self.label, "size": self.size,
               "keys": {k: key.to_json() for k, key in self.keys.items()}}
        if self.settings:
            out["settings"] = dict(self.settings)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Method:
        """A declaration from its manifest entry (:meth:`to_json`)."""
        return cls(data["name"], data["strategy"], data["exact"], data["label"],
                   {k: Key.from_json(v) for k, v in data["keys"].items()}, data["size"],
                   data.get("settings", {}))
