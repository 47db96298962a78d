"""What the command line, the configuration checks and the reports know about methods,
benchmarks, models, buffer selections and the exactness audit's fixed settings — without
importing torch or Avalanche.

Parsing arguments, refusing bad input, ``--help`` and reading records and writing reports
use only this module, so they take a fraction of a second; the code that trains registers
the same names (:func:`pall_avalanche.strategies.bind_method` gives each built-in
:class:`MethodInfo` its strategy class, :func:`~pall_avalanche.strategies.register_method`
describes and binds a new method; :data:`pall_avalanche.data.BENCHMARKS`,
:data:`pall_avalanche.models.MODELS` and :data:`pall_avalanche.plugins.SELECTIONS` hold the
builders). ``tests/test_startup.py`` checks that both sides agree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ABLATION_METHODS",
    "AUDIT_REQUESTS",
    "AUDIT_FOLDS",
    "AUDIT_REFERENCE_SEED_OFFSET",
    "BENCHMARK_INFO",
    "DENSE_SIZE",
    "INDEPENDENT_SIZE",
    "METHOD_INFO",
    "MODEL_NAMES",
    "SELECTION_NAMES",
    "SUBNETWORK_SIZE",
    "TABLE1_ALPHAS",
    "TABLE1_METHODS",
    "BenchmarkInfo",
    "MethodInfo",
    "describe_method",
    "method_label",
]

#: Table 1's symbolic model size of a dense model (Sequential, EWC, LwF, LSF, GEM, ER, DER++).
DENSE_SIZE = "d"
#: ... of the subnetwork methods (PackNet, WSN, PALL, the sparse subnetworks): d plus masks.
SUBNETWORK_SIZE = "d + M_i"
#: ... of Independent: one dense model per active task.
INDEPENDENT_SIZE = "d × |Ω_i|"
MODEL_SIZES = (DENSE_SIZE, SUBNETWORK_SIZE, INDEPENDENT_SIZE)


@dataclass(frozen=True)
class MethodInfo:
    """A method as the command line and the reports see it.

    :param name: the command-line name.
    :param exact: whether unlearning is exact (Table 1 reports A_u as "Exact").
    :param params: configuration keys passed to the strategy as keyword arguments.
    :param label: the name printed in tables.
    :param optional: configuration keys passed as keyword arguments when the configuration
        has them (the strategy's default otherwise).
    :param config: configuration values this method (a variant) sets: applied over the
        global keys and under the configuration's own ``methods`` entry by
        :func:`~pall_avalanche.config.resolve_method_config`, so records show them.
    :param size: Table 1's symbolic model size (:data:`MODEL_SIZES`).
    """

    name: str
    exact: bool
    params: tuple[str, ...] = ()
    label: str = ""
    optional: tuple[str, ...] = ()
    config: Mapping[str, Any] = field(default_factory=dict)
    size: str = DENSE_SIZE


#: Every described method, in registration order.
METHOD_INFO: dict[str, MethodInfo] = {}


def describe_method(name: str, *, exact: bool, params: Sequence[str] = (),
                    label: str | None = None, optional: Sequence[str] = (),
                    config: Mapping[str, Any] | None = None, size: str = DENSE_SIZE
                    ) -> MethodInfo:
    """Describe a method (see :class:`MethodInfo` for the arguments); describing a name again
    with the same facts returns the existing description."""
    if size not in MODEL_SIZES:
        raise ValueError(f"size={size!r} is invalid; valid: {MODEL_SIZES}")
    info = MethodInfo(name, exact, tuple(params), label or name, tuple(optional),
                      dict(config or {}), size)
    if name in METHOD_INFO and METHOD_INFO[name] != info:
        raise ValueError(f"method {name!r} is already described differently "
                         f"({METHOD_INFO[name]}); pick another name")
    METHOD_INFO[name] = info
    return info


def method_label(method: str) -> str:
    """The table label of a method (its name if it is not described)."""
    return METHOD_INFO[method].label if method in METHOD_INFO else method


_PALL = ("alpha", "n_retrain_iters", "beta", "buffer_size", "buffer_selection")
describe_method("sequential", exact=False, label="Sequential")
describe_method("independent", exact=True, label="Independent", size=INDEPENDENT_SIZE)
describe_method("pall", exact=True, label="PALL", params=_PALL, optional=("strict_cascade",),
                size=SUBNETWORK_SIZE)
# Strict PALL variants for the exactness audit (docs/fidelity.md; README "How exact is exact?").
describe_method("pall_beta0", exact=True, label="PALL (β=0)", params=_PALL,
                optional=("strict_cascade",), config={"beta": 0.0}, size=SUBNETWORK_SIZE)
describe_method("pall_strict", exact=True, label="PALL (β=0, cascade)", params=_PALL,
                optional=("strict_cascade",), config={"beta": 0.0, "strict_cascade": True},
                size=SUBNETWORK_SIZE)
describe_method("er", exact=False, label="ER", params=("buffer_size", "n_retrain_iters"))
describe_method("derpp", exact=False, label="DER++",
                params=("buffer_size", "n_retrain_iters", "beta"))
describe_method("gem", exact=False, label="GEM",
                params=("buffer_size", "n_retrain_iters", "memory_strength"))
describe_method("er_retrain", exact=True, label="ER (Retraining)",
                params=("buffer_size", "retrain_epochs"))
describe_method("ewc", exact=False, label="EWC", params=("ewc_lambda",))
describe_method("lwf", exact=False, label="LwF", params=("lwf_alpha", "lwf_temperature"))
describe_method("lsf", exact=False, label="LSF",
                params=("ewc_lambda", "lwf_alpha", "lwf_temperature", "lsf_gamma",
                        "n_retrain_iters"))
describe_method("packnet", exact=False, label="PackNet", size=SUBNETWORK_SIZE)
describe_method("wsn", exact=False, label="WSN", params=("alpha",), size=SUBNETWORK_SIZE)
describe_method("static_sparse", exact=True, label="Static sparse (Ind.)",
                size=SUBNETWORK_SIZE)
describe_method("dynamic_sparse", exact=True, label="Dynamic sparse (Ind.)",
                size=SUBNETWORK_SIZE)

#: The methods of the paper's Table 1, in its row order.
TABLE1_METHODS = ("sequential", "ewc", "lwf", "lsf", "gem", "er", "derpp", "packnet", "wsn",
                  "pall", "independent")
#: PALL's connectivities α in Table 1 (one row each); every other table uses α = 1/T.
TABLE1_ALPHAS = (0.05, 0.1, 0.2)
#: The ablation methods (ER (Retraining), the independent sparse subnetworks).
ABLATION_METHODS = ("er_retrain", "static_sparse", "dynamic_sparse")


@dataclass(frozen=True)
class BenchmarkInfo:
    """A benchmark's class count and default task count."""

    name: str
    n_classes: int
    default_n_tasks: int

    def valid_n_tasks(self) -> list[int]:
        """The task counts from 2 up that split the classes evenly."""
        return [k for k in range(2, self.n_classes + 1) if self.n_classes % k == 0]


#: name → facts (the builders: :data:`pall_avalanche.data.BENCHMARKS`).
BENCHMARK_INFO: dict[str, BenchmarkInfo] = {
    info.name: info for info in (
        BenchmarkInfo("digits", 10, 5),
        BenchmarkInfo("cifar10", 10, 5),
        BenchmarkInfo("cifar100", 100, 10),
        BenchmarkInfo("tinyimagenet", 200, 20),
    )
}
#: The model names (the constructors: :data:`pall_avalanche.models.MODELS`).
MODEL_NAMES = ("mlp", "cnn", "resnet18", "resnet34", "vit_t8")
#: The buffer selections (the functions: :data:`pall_avalanche.plugins.SELECTIONS`).
SELECTION_NAMES = ("random", "herding", "entropy", "confidence", "logit_distance")

#: The exactness audit's sequence R (:mod:`pall_avalanche.audit`): task 1 learned, then
#: unlearned; the oracle sequence R′ is R without task 1.
AUDIT_REQUESTS = ("L0", "L1", "L2", "L3", "U1", "L4")
#: Added to a seed for the audit's reference oracle: other training randomness, same split.
AUDIT_REFERENCE_SEED_OFFSET = 100_000
#: Folds of the audit's cross-validated distinguisher (at least this many seeds).
AUDIT_FOLDS = 5
