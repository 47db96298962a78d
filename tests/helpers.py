"""Shared test fixtures: a tiny digits set-up with real training."""

from __future__ import annotations

import copy

import torch

from pall_avalanche.data import build_benchmark
from pall_avalanche.evaluation import RequestEvaluationPlugin
from pall_avalanche.models import build_model
from pall_avalanche.requests import Request, RequestSequence
from pall_avalanche.strategies import METHODS, build_strategy

FAST_CONFIG = {
    "benchmark": "digits", "n_tasks": 5, "model": "mlp", "n_unlearn": 3, "epochs": 2,
    "batch_size": 32, "eval_batch_size": 64, "optimizer": "sgd", "lr": 0.05, "momentum": 0.9,
    "weight_decay": 5e-4, "lr_schedule": "constant", "train_per_task": 120,
    "alpha": 0.2, "buffer_size": 100, "buffer_selection": "random", "n_retrain_iters": 50,
    "beta": 0.5, "memory_strength": 0.5, "retrain_epochs": 10,
    "ewc_lambda": 1e3, "lwf_alpha": 1.0, "lwf_temperature": 2.0, "lsf_gamma": 10.0,
}

# A two-block ViT for 8x8 digits (the ViT-T/8 code path at test scale).
TINY_VIT = {"patch_size": 4, "width": 24, "depth": 2, "heads": 2, "mlp_dim": 48}


def seq(text: str, n_tasks: int = 5) -> RequestSequence:
    """``"L0 L1 U0"`` → a RequestSequence."""
    return RequestSequence(
        [Request("learn" if tok[0] == "L" else "unlearn", int(tok[1:])) for tok in text.split()],
        n_tasks,
    )


def make_strategy(method: str, *, seed: int = 0, model: str = "mlp", **overrides):
    """(strategy, benchmark, evaluation plugin) for ``method`` on a reduced digits set."""
    config = {**FAST_CONFIG, "model": model, **overrides}
    torch.manual_seed(seed)
    bm = build_benchmark("digits", seed=seed, train_per_task=config["train_per_task"])
    net = build_model(model, input_shape=bm.split.input_shape, n_tasks=5, classes_per_task=2,
                      per_task_tokens=METHODS[method].strategy.per_task_tokens,
                      **config.get("model_kwargs", {}))
    evaluation = RequestEvaluationPlugin(bm.test_stream, eval_mb_size=config["eval_batch_size"])
    strategy = build_strategy(method, model=net, config=config, plugins=[evaluation])
    return strategy, bm, evaluation


def snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return copy.deepcopy({k: v.detach().clone() for k, v in module.state_dict().items()})


@torch.no_grad()
def predictions(model: torch.nn.Module, bm, task: int) -> torch.Tensor:
    """Logits of ``model`` on task ``task``'s whole test set (eval mode)."""
    model.eval()
    data = bm.test_stream[task].dataset.eval()
    x = torch.stack([data[i][0] for i in range(len(data))])
    out = model(x, task)
    model.train()
    return out
