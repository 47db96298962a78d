"""Strategies: every method of the paper as an Avalanche strategy that can also unlearn."""

from pall_avalanche.catalog import ABLATION_METHODS, TABLE1_ALPHAS, TABLE1_METHODS
from pall_avalanche.strategies.base import UnlearningPlugin, UnlearningTemplate
from pall_avalanche.strategies.ewc import EWC
from pall_avalanche.strategies.independent import Independent, IndependentModels
from pall_avalanche.strategies.lsf import LSF
from pall_avalanche.strategies.lwf import LwF
from pall_avalanche.strategies.packnet import PackNet
from pall_avalanche.strategies.pall import PALL
from pall_avalanche.strategies.registry import (
    METHODS,
    MethodSpec,
    bind_method,
    build_strategy,
    make_optimizer,
    register_method,
)
from pall_avalanche.strategies.rehearsal import ER, GEM, DERpp, ERRetraining
from pall_avalanche.strategies.sequential import Sequential
from pall_avalanche.strategies.sparse import DynamicSparse, StaticSparse
from pall_avalanche.strategies.subnetwork import SubnetworkStrategy
from pall_avalanche.strategies.wsn import WSN

for _name, _strategy in {
    "sequential": Sequential, "independent": Independent, "pall": PALL, "pall_beta0": PALL,
    "pall_strict": PALL, "er": ER, "derpp": DERpp, "gem": GEM, "er_retrain": ERRetraining,
    "ewc": EWC, "lwf": LwF, "lsf": LSF, "packnet": PackNet, "wsn": WSN,
    "static_sparse": StaticSparse, "dynamic_sparse": DynamicSparse,
}.items():
    bind_method(_name, _strategy)

__all__ = [
    "ABLATION_METHODS",
    "DERpp",
    "DynamicSparse",
    "ER",
    "ERRetraining",
    "EWC",
    "GEM",
    "LSF",
    "METHODS",
    "Independent",
    "IndependentModels",
    "LwF",
    "MethodSpec",
    "PALL",
    "PackNet",
    "Sequential",
    "StaticSparse",
    "SubnetworkStrategy",
    "TABLE1_ALPHAS",
    "TABLE1_METHODS",
    "UnlearningPlugin",
    "UnlearningTemplate",
    "WSN",
    "bind_method",
    "build_strategy",
    "make_optimizer",
    "register_method",
]
