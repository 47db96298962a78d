"""Strategies: every method of the paper as an Avalanche strategy that can also unlearn."""

from pall_avalanche.strategies.base import UnlearningPlugin, UnlearningTemplate
from pall_avalanche.strategies.independent import Independent, IndependentModels
from pall_avalanche.strategies.pall import PALL
from pall_avalanche.strategies.registry import (
    METHODS,
    MethodSpec,
    build_strategy,
    make_optimizer,
    register_method,
)
from pall_avalanche.strategies.sequential import Sequential

register_method("sequential", Sequential, exact=False, label="Sequential")
register_method("independent", Independent, exact=True, label="Independent")
register_method("pall", PALL, exact=True, label="PALL",
                params=("alpha", "n_retrain_iters", "beta", "buffer_size"))

__all__ = [
    "METHODS",
    "Independent",
    "IndependentModels",
    "MethodSpec",
    "PALL",
    "Sequential",
    "UnlearningPlugin",
    "UnlearningTemplate",
    "build_strategy",
    "make_optimizer",
    "register_method",
]
