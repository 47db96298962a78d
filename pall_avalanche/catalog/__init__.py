"""The catalog of methods, benchmarks and models — built-in ones and a user's — and what the
command line, the configuration checks and the reports know about them, without importing
torch or Avalanche.

A method is declared once, next to its strategy class: a :class:`Method` (its name, label,
exactness and :class:`Key` hyper-parameters) in the ``DECLARATIONS`` tuple of its module. The
built-in declarations reach the catalog through a manifest generated from those tuples
(:data:`MANIFEST`), so parsing arguments, refusing bad input, ``--help``, reading records and
writing reports import neither torch nor Avalanche and take a fraction of a second; a user's
extension (``--plugin FILE``, the ``pall_avalanche.extensions`` entry points:
:mod:`pall_avalanche.extensions`) passes its declaration to :func:`register_method`.
Benchmarks and models are registered with :func:`register_benchmark` and
:func:`register_model`, naming their code as the object itself or as an import path
``"package.module:attribute"`` loaded only when a run needs it (:func:`load`);
``tests/test_startup.py`` checks that every built-in entry loads.
"""

from __future__ import annotations

import json
from importlib.resources import files

from pall_avalanche.catalog.declaration import Key, Method
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
    "AUDIT_DENSE_LEAKS",
    "AUDIT_LEAKS",
    "AUDIT_PER_TASK_CONTROL",
    "AUDIT_PER_TASK_LEAKS",
    "BENCHMARK_INFO",
    "CLPU_SIZE",
    "DENSE_SIZE",
    "EMBEDDING_SIZE",
    "FIELD_METHODS",
    "HYPERNETWORK_SIZE",
    "INDEPENDENT_SIZE",
    "MANIFEST",
    "METHOD_INFO",
    "MODEL_INFO",
    "PAPER_BENCHMARKS",
    "SUBNETWORK_SIZE",
    "TABLE1_ALPHAS",
    "TABLE1_METHODS",
    "BenchmarkInfo",
    "Key",
    "Method",
    "ModelInfo",
    "load",
    "method_label",
    "register_benchmark",
    "register_method",
    "register_model",
]

#: The built-in methods' declarations, generated from the ``DECLARATIONS`` of each strategy module
#: (``python -m pall_avalanche.strategies.manifest``; a test checks it is current).
MANIFEST = "methods.json"
for _entry in json.loads((files(__name__) / MANIFEST).read_text(encoding="utf-8"))["methods"]:
    register_method(Method.from_json(_entry))

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

#: The audit's positive control: PALL whose unlearning changes nothing.
AUDIT_CONTROL = "pall_no_unlearning"
#: The audit's leaky PALL variants: the dose-response (a fraction of what t trained kept,
#: largest first; its f = 1 end is left to the positive control, which keeps all of it too),
#: then one channel each.
AUDIT_LEAKS = ("pall_leak_redraw_50", "pall_leak_redraw_25", "pall_leak_redraw_10",
               "pall_leak_body", "pall_leak_head", "pall_leak_buffer")
#: The audit's positive control of the per-task models (Independent keeping t's model).
AUDIT_PER_TASK_CONTROL = "independent_no_unlearning"
#: The leaky variants of the per-task models: Independent keeping part of t's model.
AUDIT_PER_TASK_LEAKS = ("independent_leak_50", "independent_leak_25")
#: The leaky variants of one dense network: Sequential with part of t's update removed.
AUDIT_DENSE_LEAKS = ("sequential_leak_50", "sequential_leak_25")

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
