"""Shared test fixtures: a tiny digits set-up with real training, and small dataset files in
the official CIFAR-10 layout."""

from __future__ import annotations

import copy
import importlib.util
import math
import pickle
import sys
from pathlib import Path

import pytest
import torch

from pall_avalanche.catalog import METHOD_INFO
from pall_avalanche.config import resolve_method_config
from pall_avalanche.rehearsal.memory import BufferStack
from pall_avalanche.requests import RequestSequence
from pall_avalanche.runs.build import build_run

FAST_CONFIG = {
    "benchmark": "digits", "n_tasks": 5, "model": "mlp", "n_unlearn": 3, "epochs": 2,
    "batch_size": 32, "eval_batch_size": 64, "optimizer": "sgd", "lr": 0.05, "momentum": 0.9,
    "weight_decay": 5e-4, "lr_schedule": "constant", "train_per_task": 120,
    "alpha": 0.2, "buffer_size": 100, "buffer_selection": "random", "n_retrain_iters": 50,
    "beta": 0.5, "memory_strength": 0.5, "retrain_epochs": 10,
    "ewc_lambda": 1e3, "lwf_alpha": 1.0, "lwf_temperature": 2.0, "lsf_gamma": 10.0,
}

#: The package's own methods (a plugin's, registered by another test module, are left out, so
#: that what is collected does not depend on collection order), without the audit-only leaky
#: variants and positive controls (tests/audit/test_leaky.py).
BUILT_IN_METHODS = [m for m, info in METHOD_INFO.items()
                    if info.where.startswith("pall_avalanche.")
                    and not info.where.startswith(("pall_avalanche.strategies.leaky:",
                                                   "pall_avalanche.strategies.controls:"))]

#: The methods two per-method tests run in the default suite; the others run them with
#: ``-m slow``. In the default suite every method still resumes a stopped run bit for bit (the
#: contract's "resume" check) and learns in Avalanche's own set-ups (an Avalanche model learned
#: and unlearned, replayed samples through their own task); what the slow suite adds for them
#: is a killed run's checkpoint contents and heads grown to tasks of 4, 2, 2, 2 classes.
DEFAULT_SUITE_METHODS = ("pall", "derpp", "clpu_derpp")


def method_kwargs(method: str, config: dict) -> dict:
    """The keyword arguments of ``method``'s strategy for its declared keys, as a run resolves
    them from ``config``."""
    resolved = resolve_method_config(config, method)
    return {k: resolved[k] for k in METHOD_INFO[method].keys}


def default_suite_subset(methods) -> list:
    """``methods`` as pytest parameters, those outside :data:`DEFAULT_SUITE_METHODS` marked
    slow."""
    return [m if m in DEFAULT_SUITE_METHODS else pytest.param(m, marks=pytest.mark.slow)
            for m in methods]


# A two-block ViT for 8x8 digits (the ViT-T/8 code path at test scale).
TINY_VIT = {"patch_size": 4, "width": 24, "depth": 2, "heads": 2, "mlp_dim": 48}


def benchmark_script(name: str):
    """``benchmarks/<name>.py`` loaded as a module (as ``python benchmarks/<name>.py`` runs
    it), registered in ``sys.modules`` under ``bench_<name>``."""
    spec = importlib.util.spec_from_file_location(
        f"bench_{name}", Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def seq(text: str, n_tasks: int = 5) -> RequestSequence:
    """``"L0 L1 U0"`` → a RequestSequence."""
    return RequestSequence.parse(text, n_tasks)


def make_strategy(method: str, *, seed: int = 0, model: str = "mlp", measured: bool = True,
                  **overrides):
    """(strategy, benchmark, request log) for ``method`` on a reduced digits set, its
    evaluator measuring every request as the runner's does (``measured=False``: no
    measurement and no log, for tests that rewind the strategy's state and replay a
    request)."""
    config = {**FAST_CONFIG, "model": model, **overrides}
    built = build_run(method, config, seed=seed, measured=measured)
    return built.strategy, built.benchmark, built.log


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


def spy_before(owner, name: str, strategy) -> dict:
    """Wrap ``owner.<name>`` (a plugin hook, ``_unlearn``) so that every call first records
    the strategy's maskable weights (``"weights"``) and the CPU RNG state (``"rng"``) in the
    returned dict, then runs the real step."""
    seen: dict = {}
    step = getattr(owner, name)

    def recording(*args, **kwargs):
        seen["weights"] = {n: w.detach().clone() for n, w in strategy.model.named_weights()}
        seen["rng"] = torch.get_rng_state()
        return step(*args, **kwargs)

    setattr(owner, name, recording)
    return seen


def seeded_redraw(rng_state: torch.Tensor, current: dict[str, torch.Tensor], entries
                  ) -> dict[str, torch.Tensor]:
    """``current`` with the entries of the MaskSet ``entries`` replaced by values drawn, from
    the CPU RNG state ``rng_state``, from the paper's initialisation: Kaiming-uniform with
    a=√5, i.e. U(±1/√fan_in), fan_in of the layer's weight (a bias takes its weight's); one
    draw of the whole tensor for every tensor with an entry to re-draw, in ``entries``' order.
    Every other entry is ``current``'s."""
    generator = torch.Generator().set_state(rng_state)
    out = dict(current)
    for name, mask in entries.bools().items():
        if mask.any():
            fan_in = current[name.rsplit(".", 1)[0] + ".weight"][0].numel()
            bound = 1.0 / math.sqrt(fan_in)
            draw = torch.empty(mask.shape).uniform_(-bound, bound, generator=generator)
            out[name] = torch.where(mask, draw, current[name])
    return out


def dump_pickle(path: Path, obj: dict) -> None:
    with path.open("wb") as f:
        pickle.dump(obj, f)


class HostSyncError(AssertionError):
    """A tensor was turned into a Python value (a host synchronisation on a GPU) while the
    detector was armed."""


#: Tensor methods that hand a tensor's value to Python (each waits for the device on a GPU),
#: and torch functions that return a Python bool computed from tensor values.
_TENSOR_CONVERSIONS = ("item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__float__",
                       "__index__", "__complex__", "__array__", "equal")
_TORCH_CONVERSIONS = ("equal", "allclose", "is_nonzero")


class HostSyncDetector:
    """While :attr:`armed`, every tensor → Python conversion (``.item()``, ``.tolist()``,
    ``.cpu()``, ``.numpy()``, ``bool(t)``, ``int(t)``, ``float(t)``, indexing a sequence by a
    tensor, ``torch.equal`` ...) raises :class:`HostSyncError`. On CPU none of them waits, so
    this is how a CPU test sees what would synchronise a GPU step. Use as a context manager
    (patches installed on entry, removed on exit); arm it around what must not convert, e.g.
    with :meth:`plugins` around every training iteration of a strategy."""

    def __init__(self) -> None:
        self.armed = False
        self._saved: list[tuple[object, str, object]] = []

    def _guard(self, owner: object, name: str) -> None:
        original = getattr(owner, name)
        detector = self

        def guarded(*args, **kwargs):
            if detector.armed:
                raise HostSyncError(f"{getattr(owner, '__name__', owner)}.{name} inside a "
                                    "step that must not synchronise")
            return original(*args, **kwargs)

        self._saved.append((owner, name, original))
        setattr(owner, name, guarded)

    def __enter__(self) -> HostSyncDetector:
        for name in _TENSOR_CONVERSIONS:
            self._guard(torch.Tensor, name)
        for name in _TORCH_CONVERSIONS:
            self._guard(torch, name)
        return self

    def __exit__(self, *exc) -> None:
        self.armed = False
        for owner, name, original in reversed(self._saved):
            setattr(owner, name, original)
        self._saved.clear()

    def plugins(self) -> tuple[object, object]:
        """(first, last): Avalanche plugins that arm the detector when a training iteration
        starts and disarm it when it ends; put ``first`` before every other plugin and
        ``last`` after them (the evaluator, which Avalanche runs after the plugins, stays
        outside)."""
        from pall_avalanche.core import UnlearningPlugin

        detector = self

        class Arm(UnlearningPlugin):
            def before_training_iteration(self, strategy, **kwargs):
                detector.armed = True

        class Disarm(UnlearningPlugin):
            def after_training_iteration(self, strategy, **kwargs):
                detector.armed = False

        return Arm(), Disarm()


class BufferDraws:
    """Records every replay draw from the stacked buffers (``BufferStack.draw``, patched on
    the class with ``monkeypatch``): :attr:`draws` lists ``(task, j, indices)`` for each task
    and each of its mini-batches j (0: the MSE mini-batch when β > 0, then the CE one), in the
    order drawn; :meth:`clear` empties it."""

    def __init__(self, monkeypatch) -> None:
        self.draws: list[tuple[int, int, torch.Tensor]] = []
        draw = BufferStack.draw

        def recording(stack, n, repeats=1):
            index = draw(stack, n, repeats)
            self.draws += [(task, j, index[g, j]) for g, task in enumerate(stack.tasks)
                           for j in range(index.shape[1])]
            return index

        monkeypatch.setattr(BufferStack, "draw", recording)

    def clear(self) -> None:
        self.draws = []

    @property
    def tasks(self) -> list[int]:
        """The task of every drawn mini-batch, in order."""
        return [task for task, _, _ in self.draws]
