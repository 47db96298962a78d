"""The one catalog of methods, benchmarks and models — built-in ones and a user's — and what
the command line, the configuration checks and the reports know about them, without importing
torch or Avalanche.

A method, a benchmark or a model is registered once, next to its definition, with
:func:`register_method`, :func:`register_benchmark` or :func:`register_model` (also importable
as ``from pall_avalanche import register_method, ...``). The entry names its code either as the
object itself or as an import path ``"package.module:attribute"`` that is loaded only when a run
needs it (:func:`load`): the built-in entries below are import paths, so parsing arguments,
refusing bad input, ``--help``, reading records and writing reports import neither torch nor
Avalanche and take a fraction of a second. A user's plugin (``--plugin FILE``, the
``pall_avalanche.extensions`` entry points: :mod:`pall_avalanche.extensions`) calls the same
functions; ``tests/test_startup.py`` checks that every built-in entry loads.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ABLATION_METHODS",
    "AUDIT_CONTROL",
    "AUDIT_LEAKS",
    "BENCHMARK_INFO",
    "CLPU_SIZE",
    "DENSE_SIZE",
    "EMBEDDING_SIZE",
    "FIELD_METHODS",
    "HYPERNETWORK_SIZE",
    "INDEPENDENT_SIZE",
    "METHOD_INFO",
    "MODEL_INFO",
    "SUBNETWORK_SIZE",
    "TABLE1_ALPHAS",
    "TABLE1_METHODS",
    "BenchmarkInfo",
    "MethodInfo",
    "ModelInfo",
    "load",
    "method_label",
    "register_benchmark",
    "register_method",
    "register_model",
]

#: Table 1's symbolic model size of a dense model (Sequential, EWC, LwF, LSF, GEM, ER, DER++).
DENSE_SIZE = "d"
#: ... of the subnetwork methods (PackNet, WSN, PALL, the sparse subnetworks): d plus masks.
SUBNETWORK_SIZE = "d + M_i"
#: ... of Independent: one dense model per active task.
INDEPENDENT_SIZE = "d × |Ω_i|"
#: ... of CLPU-DER++: the main network plus one side network per live temporary task.
CLPU_SIZE = "d × (1 + |Ω_T|)"
#: ... of HAT: d plus the learned tasks' gate embeddings.
EMBEDDING_SIZE = "d + E_i"
#: ... of UnCLe: the hypernetwork h plus the learned tasks' embeddings.
HYPERNETWORK_SIZE = "h + E_i"
MODEL_SIZES = (DENSE_SIZE, SUBNETWORK_SIZE, INDEPENDENT_SIZE, CLPU_SIZE, EMBEDDING_SIZE,
               HYPERNETWORK_SIZE)
#: The types a method's own configuration key may have (its default's type).
KEY_TYPES = (bool, int, float, str)
#: The keyword arguments :func:`~pall_avalanche.strategies.build_strategy` gives every
#: strategy itself: no method's own key may take these names.
STRATEGY_ARGUMENTS = ("model", "optimizer", "train_mb_size", "train_epochs", "eval_mb_size",
                      "lr_schedule", "amp", "channels_last", "device", "plugins", "evaluator")


def load(ref: Any) -> Any:
    """The object an entry names: ``ref`` itself, or the attribute of an import path
    ``"package.module:attribute"`` (imported now).

    :raises ValueError: the path is malformed, or its module or attribute cannot be loaded.
    """
    if not isinstance(ref, str):
        return ref
    module, sep, attribute = ref.partition(":")
    if not sep or not module or not attribute:
        raise ValueError(f"{ref!r} is not an import path of the form 'package.module:name'")
    try:
        obj = importlib.import_module(module)
        for part in attribute.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"cannot load {ref!r} ({type(err).__name__}: {err})") from None
    return obj


def lazy_names(package: str, where: Mapping[str, str]
               ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__`` that import each public name from its
    submodule on first use (``where``: name → submodule), so importing the package stays light
    (``__getattr__, __dir__ = lazy_names(__name__, _WHERE)``)."""
    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{where[name]}"), name)

    def __dir__() -> list[str]:
        return sorted(where)

    return __getattr__, __dir__


def _check_name(name: str, registry: Mapping[str, Any], what: str) -> None:
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"{what} name {name!r} is invalid; use letters, digits and underscores")
    if name in registry:
        raise ValueError(f"{what} {name!r} is already registered ({registry[name].where}); "
                         "pick another name")


def _where(ref: Any) -> str:
    """Where an entry's code is, for messages: its import path or its qualified name."""
    if isinstance(ref, str):
        return ref
    return f"{getattr(ref, '__module__', '?')}:{getattr(ref, '__qualname__', repr(ref))}"


@dataclass(frozen=True)
class MethodInfo:
    """A registered method (see :func:`register_method` for the fields)."""

    name: str
    strategy: Any
    exact: bool
    params: tuple[str, ...] = ()
    label: str = ""
    optional: tuple[str, ...] = ()
    config: Mapping[str, Any] = field(default_factory=dict)
    ranges: Mapping[str, tuple[float | None, float | None]] = field(default_factory=dict)
    size: str = DENSE_SIZE

    @property
    def where(self) -> str:
        """Where the strategy's code is: its import path or qualified name."""
        return _where(self.strategy)


#: Every registered method, in registration order.
METHOD_INFO: dict[str, MethodInfo] = {}


def register_method(name: str, strategy: Any, *, exact: bool, label: str | None = None,
                    config: Mapping[str, Any] | None = None,
                    ranges: Mapping[str, tuple[float | None, float | None]] | None = None,
                    params: Sequence[str] = (), optional: Sequence[str] = (),
                    size: str | None = None) -> MethodInfo:
    """Register a method: ``--methods NAME`` then runs it in every script, the sweeps and the
    audit, with the paper's protocol, metrics and reports.

    :param name: the command-line name (letters, digits, underscores; not taken).
    :param strategy: its strategy class (an
        :class:`~pall_avalanche.strategies.UnlearningTemplate` subclass) or its import path
        ``"package.module:Class"`` (loaded when a run needs it). It is called as
        ``Strategy(model=..., optimizer=..., train_mb_size=..., train_epochs=...,
        eval_mb_size=..., device=..., plugins=..., evaluator=..., lr_schedule=..., amp=...,
        channels_last=..., <params>, <optional>, <own keys>)``.
    :param exact: whether its unlearning is exact (Table 1 prints A_u as "Exact"; the
        contract check :mod:`pall_avalanche.check_method` holds it to that).
    :param label: the name printed in tables (default: ``name``).
    :param config: configuration values the method sets: a key the configuration already
        knows (``beta``, ``lr``, ...) is set for this method (a variant such as
        ``pall_beta0``); any other key is the method's **own key**, typed by its default
        (bool, int, float or str), passed to the strategy as a keyword argument, checked like
        a built-in key and set from the command line with
        ``--set methods.NAME.KEY=VALUE``.
    :param ranges: own key → (low, high), inclusive bounds (``None``: unbounded) of a number.
    :param params: configuration keys the strategy takes as keyword arguments.
    :param optional: configuration keys passed when the configuration has them.
    :param size: Table 1's symbolic model size (:data:`MODEL_SIZES`); default: the
        strategy class's ``table_size`` when it is given as a class (subnetwork methods
        ``d + M_i``, Independent ``d × |Ω_i|``), else ``d``.
    :raises ValueError: a taken or invalid name, or an invalid default or range.
    """
    _check_name(name, METHOD_INFO, "method")
    config = dict(config or {})
    ranges = dict(ranges or {})
    for key, default in config.items():
        if not isinstance(key, str) or not key.isidentifier():
            raise ValueError(f"method {name!r}: configuration key {key!r} is invalid")
        if key in STRATEGY_ARGUMENTS:
            raise ValueError(f"method {name!r}: config key {key!r} is a strategy argument the "
                             f"harness sets itself ({', '.join(STRATEGY_ARGUMENTS)}); rename it")
        if not isinstance(default, KEY_TYPES):
            raise ValueError(f"method {name!r}: config[{key!r}] = {default!r} must be a bool, "
                             "int, float or str (its type is the key's type)")
    for key, bounds in ranges.items():
        if key not in config or isinstance(config[key], (bool, str)):
            raise ValueError(f"method {name!r}: ranges[{key!r}] needs a numeric default in "
                             "config")
        if not (isinstance(bounds, tuple) and len(bounds) == 2 and all(
                b is None or (isinstance(b, (int, float)) and not isinstance(b, bool))
                for b in bounds)):
            raise ValueError(f"method {name!r}: ranges[{key!r}] must be (low, high), numbers "
                             f"or None, got {bounds!r}")
        low, high = bounds
        if (low is not None and config[key] < low) or (high is not None and config[key] > high):
            raise ValueError(f"method {name!r}: config[{key!r}] = {config[key]!r} lies outside "
                             f"its range {bounds!r}")
    if size is None:
        size = _size_of(strategy)
    if size not in MODEL_SIZES:
        raise ValueError(f"size={size!r} is invalid; valid: {MODEL_SIZES}")
    info = MethodInfo(name, strategy, bool(exact), tuple(params), label or name,
                      tuple(optional), config, ranges, size)
    METHOD_INFO[name] = info
    return info


def _size_of(strategy: Any) -> str:
    """Table 1's symbolic size from a strategy class (its ``table_size``; ``d`` for an
    import path, whose class is not imported here)."""
    return DENSE_SIZE if isinstance(strategy, str) else getattr(strategy, "table_size", DENSE_SIZE)


def method_label(method: str) -> str:
    """The table label of a method (its name if it is not registered)."""
    return METHOD_INFO[method].label if method in METHOD_INFO else method


_PALL = ("alpha", "n_retrain_iters", "beta", "buffer_size", "buffer_selection")
_PALL_OPTIONS = ("strict_cascade", "retrain_tokens")
_STRATEGIES = "pall_avalanche.strategies"
register_method("sequential", f"{_STRATEGIES}.sequential:Sequential", exact=False,
                label="Sequential")
register_method("independent", f"{_STRATEGIES}.independent:Independent", exact=True,
                label="Independent", size=INDEPENDENT_SIZE)
register_method("pall", f"{_STRATEGIES}.pall:PALL", exact=True, label="PALL", params=_PALL,
                optional=_PALL_OPTIONS, size=SUBNETWORK_SIZE)
# Strict PALL variants for the exactness audit (docs/fidelity.md; docs/explanation/audit.md).
register_method("pall_beta0", f"{_STRATEGIES}.pall:PALL", exact=True, label="PALL (β=0)",
                params=_PALL, optional=_PALL_OPTIONS, config={"beta": 0.0},
                size=SUBNETWORK_SIZE)
register_method("pall_strict", f"{_STRATEGIES}.pall:PALL", exact=True,
                label="PALL (β=0, cascade)", params=_PALL, optional=_PALL_OPTIONS,
                config={"beta": 0.0, "strict_cascade": True}, size=SUBNETWORK_SIZE)
register_method("pall_frozen_tokens", f"{_STRATEGIES}.pall:PALL", exact=True,
                label="PALL (frozen tokens)", params=_PALL, optional=_PALL_OPTIONS,
                config={"retrain_tokens": False}, size=SUBNETWORK_SIZE)
register_method("er", f"{_STRATEGIES}.replay:ER", exact=False, label="ER",
                params=("buffer_size", "n_retrain_iters"))
register_method("derpp", f"{_STRATEGIES}.replay:DERpp", exact=False, label="DER++",
                params=("buffer_size", "n_retrain_iters", "beta"))
register_method("gem", f"{_STRATEGIES}.replay:GEM", exact=False, label="GEM",
                params=("buffer_size", "n_retrain_iters", "memory_strength"))
register_method("er_retrain", f"{_STRATEGIES}.replay:ERRetraining", exact=True,
                label="ER (Retraining)", params=("buffer_size", "retrain_epochs"))
register_method("ewc", f"{_STRATEGIES}.ewc:EWC", exact=False, label="EWC",
                params=("ewc_lambda",))
register_method("lwf", f"{_STRATEGIES}.lwf:LwF", exact=False, label="LwF",
                params=("lwf_alpha", "lwf_temperature"))
register_method("lsf", f"{_STRATEGIES}.lsf:LSF", exact=False, label="LSF",
                params=("ewc_lambda", "lwf_alpha", "lwf_temperature", "lsf_gamma",
                        "n_retrain_iters"))
register_method("packnet", f"{_STRATEGIES}.packnet:PackNet", exact=False, label="PackNet",
                size=SUBNETWORK_SIZE)
register_method("wsn", f"{_STRATEGIES}.wsn:WSN", exact=False, label="WSN", params=("alpha",),
                size=SUBNETWORK_SIZE)
register_method("static_sparse", f"{_STRATEGIES}.sparse:StaticSparse", exact=True,
                label="Static sparse (Ind.)", size=SUBNETWORK_SIZE)
register_method("dynamic_sparse", f"{_STRATEGIES}.sparse:DynamicSparse", exact=True,
                label="Dynamic sparse (Ind.)", size=SUBNETWORK_SIZE)

# The continual-unlearning field beyond the paper (benchmarks/table_field.py; docs/fidelity.md,
# "The field"): CLPU-DER++, Amnesiac update deletion over five learners, HAT and its
# Amnesiac unlearning, UnCLe.
register_method("clpu_derpp", f"{_STRATEGIES}.clpu:CLPUDERpp", exact=True, label="CLPU-DER++",
                params=("buffer_size", "beta"), size=CLPU_SIZE)
register_method("amnesiac_sequential", f"{_STRATEGIES}.amnesiac:AmnesiacSequential",
                exact=False, label="Amnesiac Sequential")
register_method("amnesiac_ewc", f"{_STRATEGIES}.amnesiac:AmnesiacEWC", exact=False,
                label="Amnesiac EWC", params=("ewc_lambda",))
register_method("amnesiac_lwf", f"{_STRATEGIES}.amnesiac:AmnesiacLwF", exact=False,
                label="Amnesiac LwF", params=("lwf_alpha", "lwf_temperature"))
register_method("amnesiac_der", f"{_STRATEGIES}.amnesiac:AmnesiacDER", exact=False,
                label="Amnesiac DER", params=("buffer_size", "beta"))
register_method("amnesiac_derpp", f"{_STRATEGIES}.amnesiac:AmnesiacDERpp", exact=False,
                label="Amnesiac DER++", params=("buffer_size", "beta"))
register_method("hat", f"{_STRATEGIES}.hat:HAT", exact=False, label="HAT", size=EMBEDDING_SIZE,
                config={"s_max": 400.0, "lamb": 0.75},
                ranges={"s_max": (1.0, None), "lamb": (0.0, None)})
register_method("amnesiac_hat", f"{_STRATEGIES}.hat:AmnesiacHAT", exact=False,
                label="Amnesiac HAT", size=EMBEDDING_SIZE,
                config={"s_max": 400.0, "lamb": 0.75, "compensate_order": "forward"},
                ranges={"s_max": (1.0, None), "lamb": (0.0, None)})
register_method("uncle", f"{_STRATEGIES}.uncle:UnCLe", exact=False, label="UnCLe",
                config={"hnet_hidden": "64,64", "chunk_size": 2048, "embedding_dim": 32,
                        "beta_reg": 0.1, "gamma_forget": 1.0, "unlearn_steps": 300,
                        "noise_samples": 10},
                ranges={"chunk_size": (1, None), "embedding_dim": (1, None),
                        "beta_reg": (0, None), "gamma_forget": (0, None),
                        "unlearn_steps": (0, None), "noise_samples": (1, None)},
                size=HYPERNETWORK_SIZE)
#: The field's methods beyond the paper's, in table_field's row order.
FIELD_METHODS = ("clpu_derpp", "amnesiac_sequential", "amnesiac_ewc", "amnesiac_lwf",
                 "amnesiac_der", "amnesiac_derpp", "hat", "amnesiac_hat", "uncle")

#: The methods of the paper's Table 1, in its row order.
TABLE1_METHODS = ("sequential", "ewc", "lwf", "lsf", "gem", "er", "derpp", "packnet", "wsn",
                  "pall", "independent")
#: PALL's connectivities α in Table 1 (one row each); every other table uses α = 1/T.
TABLE1_ALPHAS = (0.05, 0.1, 0.2)
#: The ablation methods (ER (Retraining), the independent sparse subnetworks).
ABLATION_METHODS = ("er_retrain", "static_sparse", "dynamic_sparse")

# Audit-only PALL variants that leak a known part of D^t (pall_avalanche.audit.leaky): the
# exactness audit's positive control and its dose-response. Inexact by construction; no table
# of the paper runs them.
_LEAKY = "pall_avalanche.audit.leaky:LeakyPALL"
_LEAK_RANGE = {"leak_fraction": (0.0, 1.0)}
register_method("pall_no_unlearning", _LEAKY, exact=False, label="PALL, no unlearning (control)",
                params=_PALL, optional=_PALL_OPTIONS, size=SUBNETWORK_SIZE,
                config={"leak": "everything", "leak_fraction": 1.0}, ranges=_LEAK_RANGE)
for _percent in (100, 50, 25, 10):
    register_method(f"pall_leak_redraw_{_percent}", _LEAKY, exact=False,
                    label=f"PALL keeping {_percent} % of what t trained", params=_PALL,
                    optional=_PALL_OPTIONS, size=SUBNETWORK_SIZE, ranges=_LEAK_RANGE,
                    config={"leak": "redraw", "leak_fraction": _percent / 100})
for _leak, _what in (("body", "m̄_t (t's head re-drawn)"), ("head", "t's head"),
                     ("buffer", "B^t in retraining")):
    register_method(f"pall_leak_{_leak}", _LEAKY, exact=False, label=f"PALL keeping {_what}",
                    params=_PALL, optional=_PALL_OPTIONS, size=SUBNETWORK_SIZE,
                    ranges=_LEAK_RANGE, config={"leak": _leak, "leak_fraction": 1.0})
#: The audit's positive control: PALL whose unlearning changes nothing.
AUDIT_CONTROL = "pall_no_unlearning"
#: The audit's leaky PALL variants: the dose-response (a fraction of what t trained kept,
#: largest first), then one channel each.
AUDIT_LEAKS = ("pall_leak_redraw_100", "pall_leak_redraw_50", "pall_leak_redraw_25",
               "pall_leak_redraw_10", "pall_leak_body", "pall_leak_head", "pall_leak_buffer")


@dataclass(frozen=True)
class BenchmarkInfo:
    """A registered benchmark (see :func:`register_benchmark` for the fields)."""

    name: str
    builder: Any
    n_classes: int
    default_n_tasks: int
    config: Any = None

    @property
    def where(self) -> str:
        """Where the builder's code is: its import path or qualified name."""
        return _where(self.builder)

    def valid_n_tasks(self) -> list[int]:
        """The task counts from 2 up that split the classes evenly."""
        return [k for k in range(2, self.n_classes + 1) if self.n_classes % k == 0]


#: Every registered benchmark, in registration order.
BENCHMARK_INFO: dict[str, BenchmarkInfo] = {}


def register_benchmark(name: str, builder: Any, *, n_classes: int, default_n_tasks: int,
                       config: Any = None) -> BenchmarkInfo:
    """Register a benchmark: ``--benchmark NAME`` (or ``benchmark: NAME`` in a ``--config``
    file) then runs every script on it.

    :param name: the benchmark's name (letters, digits, underscores; not taken).
    :param builder: a callable (or its import path ``"package.module:function"``) called with
        keyword arguments ``seed``, ``n_tasks``, ``root`` (the ``data_root`` folder),
        ``train_per_task`` and ``download``, returning an Avalanche benchmark whose
        ``train_stream`` and ``test_stream`` hold one experience per task, experience t with
        task label t, every task with the same number of classes, labelled from 0 in each
        task (checked: :func:`pall_avalanche.data.check_benchmark`).
    :param n_classes: the number of classes over all tasks.
    :param default_n_tasks: T when the configuration does not set ``n_tasks``.
    :param config: what the run configuration of ``--benchmark NAME`` sets (a mapping or the
        path of a YAML file — relative paths are read from the working directory, so an extension
        gives ``Path(__file__).parent / "mine.yaml"`` — keys as in
        ``pall_avalanche/configs/digits.yaml``), over the digits configuration with this
        benchmark and ``n_tasks = default_n_tasks``.
    :raises ValueError: a taken or invalid name, or class and task counts that do not fit.
    """
    _check_name(name, BENCHMARK_INFO, "benchmark")
    for option, value in (("n_classes", n_classes), ("default_n_tasks", default_n_tasks)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"benchmark {name!r}: {option}={value!r} must be an integer >= 1")
    if n_classes % default_n_tasks:
        raise ValueError(f"benchmark {name!r}: default_n_tasks={default_n_tasks} does not "
                         f"divide its {n_classes} classes")
    info = BenchmarkInfo(name, builder, n_classes, default_n_tasks, config)
    BENCHMARK_INFO[name] = info
    return info


_DATA = "pall_avalanche.data"
register_benchmark("digits", f"{_DATA}:digits", n_classes=10, default_n_tasks=5)
register_benchmark("cifar10", f"{_DATA}:cifar10", n_classes=10, default_n_tasks=5)
register_benchmark("cifar100", f"{_DATA}:cifar100", n_classes=100, default_n_tasks=10)
register_benchmark("tinyimagenet", f"{_DATA}:tinyimagenet", n_classes=200, default_n_tasks=20)


@dataclass(frozen=True)
class ModelInfo:
    """A registered model (see :func:`register_model` for the fields)."""

    name: str
    constructor: Any

    @property
    def where(self) -> str:
        """Where the constructor's code is: its import path or qualified name."""
        return _where(self.constructor)


#: Every registered model (backbone), in registration order.
MODEL_INFO: dict[str, ModelInfo] = {}


def register_model(name: str, constructor: Any) -> ModelInfo:
    """Register a backbone: ``--set model=NAME`` then builds it (with the task-incremental
    multi-head output of :func:`pall_avalanche.models.build_model`).

    :param name: the model's name (letters, digits, underscores; not taken).
    :param constructor: a callable (or its import path) called as
        ``constructor(input_shape, **model_kwargs)`` and returning ``(backbone,
        feature_dim)``: a module mapping a batch of inputs to ``(batch, feature_dim)``
        features. A constructor with a ``token_sets`` parameter gets one token set per task
        for the subnetwork methods (as ViT-T/8's CLS token and positional embedding).
    :raises ValueError: a taken or invalid name.
    """
    _check_name(name, MODEL_INFO, "model")
    info = ModelInfo(name, constructor)
    MODEL_INFO[name] = info
    return info


_MODELS = "pall_avalanche.models"
register_model("mlp", f"{_MODELS}.small:mlp")
register_model("cnn", f"{_MODELS}.small:digits_cnn")
register_model("resnet18", f"{_MODELS}.resnet:resnet18")
register_model("resnet34", f"{_MODELS}.resnet:resnet34")
register_model("vit_t8", f"{_MODELS}.vit:vit_t8")
