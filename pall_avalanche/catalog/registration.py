"""How methods, benchmarks and models are registered (:mod:`pall_avalanche.catalog` holds the
built-in entries and re-exports all of this): the entries' records, the registries, the checks
a registration makes, and :func:`load`, which imports an entry's code when a run needs it.
Imports neither torch nor Avalanche.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pall_avalanche.catalog.declaration import Method

__all__ = [
    "BENCHMARK_INFO",
    "CLPU_SIZE",
    "DENSE_SIZE",
    "EMBEDDING_SIZE",
    "HYPERNETWORK_SIZE",
    "INDEPENDENT_SIZE",
    "METHOD_INFO",
    "MODEL_INFO",
    "MODEL_SIZES",
    "STRATEGY_ARGUMENTS",
    "SUBNETWORK_SIZE",
    "BenchmarkInfo",
    "ModelInfo",
    "lazy_names",
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


#: Every registered method's declaration, in registration order.
METHOD_INFO: dict[str, Method] = {}


def register_method(method: Method) -> Method:
    """Register a method's declaration (:class:`~pall_avalanche.catalog.declaration.Method`):
    ``--methods NAME`` then runs it in every script, the sweeps and the audit, with the
    paper's protocol, metrics and reports, its keys checked, documented and passed to its
    strategy.

    :raises ValueError: a taken or invalid name, a key named as an argument the harness gives
        every strategy itself, or a size Table 1 does not know.
    """
    if not isinstance(method, Method):
        raise ValueError(f"register_method takes a pall_avalanche.catalog.Method declaration, "
                         f"got {method!r}")
    name = method.name
    _check_name(name, METHOD_INFO, "method")
    for key in method.keys:
        if not isinstance(key, str) or not key.isidentifier():
            raise ValueError(f"method {name!r}: key {key!r} is invalid")
        if key in STRATEGY_ARGUMENTS:
            raise ValueError(f"method {name!r}: key {key!r} is a strategy argument the "
                             f"harness sets itself ({', '.join(STRATEGY_ARGUMENTS)}); rename it")
    if method.size not in MODEL_SIZES:
        raise ValueError(f"method {name!r}: size={method.size!r} is invalid; valid: "
                         f"{MODEL_SIZES}")
    METHOD_INFO[name] = method
    return method


def method_label(method: str) -> str:
    """The table label of a method (its name if it is not registered)."""
    return METHOD_INFO[method].label if method in METHOD_INFO else method


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
