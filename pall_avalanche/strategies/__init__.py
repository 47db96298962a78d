"""Strategies: every method of the paper, and of the continual-unlearning field beyond it, as
an Avalanche strategy that can also unlearn (registered by name in
:mod:`pall_avalanche.catalog`)."""

from pall_avalanche.catalog import ABLATION_METHODS, FIELD_METHODS, TABLE1_ALPHAS, TABLE1_METHODS
from pall_avalanche.strategies.amnesiac import (
    AmnesiacDER,
    AmnesiacDERpp,
    AmnesiacEWC,
    AmnesiacLwF,
    AmnesiacSequential,
)
from pall_avalanche.strategies.base import UnlearningPlugin, UnlearningTemplate
from pall_avalanche.strategies.clpu import CLPUDERpp
from pall_avalanche.strategies.ewc import EWC
from pall_avalanche.strategies.hat import HAT, AmnesiacHAT
from pall_avalanche.strategies.independent import Independent, IndependentModels
from pall_avalanche.strategies.lsf import LSF
from pall_avalanche.strategies.lwf import LwF
from pall_avalanche.strategies.packnet import PackNet
from pall_avalanche.strategies.pall import PALL
from pall_avalanche.strategies.registry import (
    METHODS,
    MethodSpec,
    build_strategy,
    make_optimizer,
    register_method,
)
from pall_avalanche.strategies.replay import ER, GEM, DERpp, ERRetraining
from pall_avalanche.strategies.sequential import Sequential
from pall_avalanche.strategies.sparse import DynamicSparse, StaticSparse
from pall_avalanche.strategies.subnetwork import SubnetworkStrategy
from pall_avalanche.strategies.uncle import UnCLe
from pall_avalanche.strategies.wsn import WSN

__all__ = [
    "ABLATION_METHODS",
    "AmnesiacDER",
    "AmnesiacDERpp",
    "AmnesiacEWC",
    "AmnesiacHAT",
    "AmnesiacLwF",
    "AmnesiacSequential",
    "CLPUDERpp",
    "FIELD_METHODS",
    "HAT",
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
    "UnCLe",
    "UnlearningTemplate",
    "WSN",
    "build_strategy",
    "make_optimizer",
    "register_method",
]
