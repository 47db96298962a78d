"""Strategies: every method of the paper as an Avalanche strategy that can also unlearn."""

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
    build_strategy,
    make_optimizer,
    register_method,
)
from pall_avalanche.strategies.rehearsal import ER, GEM, DERpp, ERRetraining
from pall_avalanche.strategies.sequential import Sequential
from pall_avalanche.strategies.sparse import DynamicSparse, StaticSparse
from pall_avalanche.strategies.subnetwork import SubnetworkStrategy
from pall_avalanche.strategies.wsn import WSN

register_method("sequential", Sequential, exact=False, label="Sequential")
register_method("independent", Independent, exact=True, label="Independent")
register_method("pall", PALL, exact=True, label="PALL",
                params=("alpha", "n_retrain_iters", "beta", "buffer_size", "buffer_selection"),
                optional=("strict_cascade",))
# Strict PALL variants for the exactness audit (docs/fidelity.md; README "How exact is exact?").
register_method("pall_beta0", PALL, exact=True, label="PALL (β=0)",
                params=("alpha", "n_retrain_iters", "beta", "buffer_size", "buffer_selection"),
                optional=("strict_cascade",), config={"beta": 0.0})
register_method("pall_strict", PALL, exact=True, label="PALL (β=0, cascade)",
                params=("alpha", "n_retrain_iters", "beta", "buffer_size", "buffer_selection"),
                optional=("strict_cascade",), config={"beta": 0.0, "strict_cascade": True})
register_method("er", ER, exact=False, label="ER", params=("buffer_size", "n_retrain_iters"))
register_method("derpp", DERpp, exact=False, label="DER++",
                params=("buffer_size", "n_retrain_iters", "beta"))
register_method("gem", GEM, exact=False, label="GEM",
                params=("buffer_size", "n_retrain_iters", "memory_strength"))
register_method("er_retrain", ERRetraining, exact=True, label="ER (Retraining)",
                params=("buffer_size", "retrain_epochs"))
register_method("ewc", EWC, exact=False, label="EWC", params=("ewc_lambda",))
register_method("lwf", LwF, exact=False, label="LwF", params=("lwf_alpha", "lwf_temperature"))
register_method("lsf", LSF, exact=False, label="LSF",
                params=("ewc_lambda", "lwf_alpha", "lwf_temperature", "lsf_gamma",
                        "n_retrain_iters"))
register_method("packnet", PackNet, exact=False, label="PackNet")
register_method("wsn", WSN, exact=False, label="WSN", params=("alpha",))
register_method("static_sparse", StaticSparse, exact=True, label="Static sparse (Ind.)")
register_method("dynamic_sparse", DynamicSparse, exact=True, label="Dynamic sparse (Ind.)")

#: The methods of the paper's Table 1, in its row order.
TABLE1_METHODS = ("sequential", "ewc", "lwf", "lsf", "gem", "er", "derpp", "packnet", "wsn",
                  "pall", "independent")
#: PALL's connectivities α in Table 1 (one row each); every other table uses α = 1/T.
TABLE1_ALPHAS = (0.05, 0.1, 0.2)
#: The ablation methods (ER (Retraining), the independent sparse subnetworks).
ABLATION_METHODS = ("er_retrain", "static_sparse", "dynamic_sparse")

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
    "build_strategy",
    "make_optimizer",
    "register_method",
]
