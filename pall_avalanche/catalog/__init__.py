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

from pall_avalanche.catalog.registration import (
    BENCHMARK_INFO,
    CLPU_SIZE,
    DENSE_SIZE,
    EMBEDDING_SIZE,
    HYPERNETWORK_SIZE,
    INDEPENDENT_SIZE,
    METHOD_INFO,
    MODEL_INFO,
    SUBNETWORK_SIZE,
    BenchmarkInfo,
    MethodInfo,
    ModelInfo,
    load,
    method_label,
    register_benchmark,
    register_method,
    register_model,
)

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
    "PAPER_BENCHMARKS",
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
                        "beta_reg": 0.1, "gamma_forget": 1.0, "unlearn_steps": 100,
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

_DATA = "pall_avalanche.data"
#: The paper's benchmarks: a run of one of them at its shipped configuration is "the paper's
#: protocol" in a report; any other benchmark is a reduced (digits) or user's one.
PAPER_BENCHMARKS = ("cifar10", "cifar100", "tinyimagenet")
register_benchmark("digits", f"{_DATA}:digits", n_classes=10, default_n_tasks=5)
register_benchmark("cifar10", f"{_DATA}:cifar10", n_classes=10, default_n_tasks=5)
register_benchmark("cifar100", f"{_DATA}:cifar100", n_classes=100, default_n_tasks=10)
register_benchmark("tinyimagenet", f"{_DATA}:tinyimagenet", n_classes=200, default_n_tasks=20)

_MODELS = "pall_avalanche.models"
register_model("mlp", f"{_MODELS}.small:mlp")
register_model("cnn", f"{_MODELS}.small:digits_cnn")
register_model("resnet18", f"{_MODELS}.resnet:resnet18")
register_model("resnet34", f"{_MODELS}.resnet:resnet34")
register_model("vit_t8", f"{_MODELS}.vit:vit_t8")
