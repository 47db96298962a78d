"""The checks of :mod:`pall_avalanche.check_method` on real training: three runs of the
runner (uninterrupted, stopped, resumed) and one with the user's optimizer and scheduler."""

from __future__ import annotations

import contextlib
import inspect
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch
from avalanche.models.utils import avalanche_forward
from avalanche.training.plugins import LRSchedulerPlugin

from pall_avalanche.audit import ProvenanceTracker
from pall_avalanche.check_method import Check
from pall_avalanche.core import RequestResult, UnlearningPlugin
from pall_avalanche.data import build_benchmark
from pall_avalanche.data.tasks import evaluation_loader
from pall_avalanche.requests import RequestKind
from pall_avalanche.runs import run_record
from pall_avalanche.runs.build import build_run
from pall_avalanche.strategies import METHODS

__all__ = ["constructor_keywords", "run_contract"]


class _Stop(Exception):
    """Ends a run in the middle, as a kill would."""


class _Recorder(UnlearningPlugin):
    """Per request: its (kind, task) from ``after_request``, every test task's logits and the
    parameters after it; stops the run at the ``stop_at``-th request (before its checkpoint is
    written)."""

    def __init__(self, test_stream, stop_at: int | None = None) -> None:
        super().__init__()
        self.test_stream = list(test_stream)
        self.stop_at = stop_at
        self.events: list[tuple[str, int]] = []
        self.logits: list[list[torch.Tensor]] = []
        self.params: list[list[torch.Tensor]] = []

    @torch.no_grad()
    def after_request(self, strategy, result: RequestResult, **kwargs) -> None:
        self.events.append((result.kind, result.task))
        if self.stop_at is not None and len(self.events) == self.stop_at:
            raise _Stop
        model, was_training = strategy.model, strategy.model.training
        model.eval()
        self.logits.append([
            torch.cat([avalanche_forward(model, x.to(strategy.device), exp.task_label)
                       for x, *_ in evaluation_loader(exp.dataset.eval(), 256)])
            for exp in self.test_stream])
        model.train(was_training)
        self.params.append([p.detach().clone() for p in model.parameters()])


class _EpochRates(UnlearningPlugin):
    """The learning rate of the optimizer that steps, at the first iteration of every epoch,
    per learning request, and the optimizers seen."""

    def __init__(self) -> None:
        super().__init__()
        self.rates: list[list[float]] = []
        self.optimizers: set[int] = set()

    def before_training_exp(self, strategy, **kwargs) -> None:
        self.rates.append([])

    def before_training_iteration(self, strategy, **kwargs) -> None:
        if strategy.clock.train_epoch_iterations == 0:
            self.rates[-1].append(strategy.optimizer.param_groups[0]["lr"])
        self.optimizers.add(id(strategy.optimizer))


def _same(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def run_contract(method: str, config: dict, seed: int,
                 requests: Sequence[tuple[str, int]], *, exact: bool,
                 device: str = "cpu") -> list[Check]:
    """The contract's checks of ``method`` with the resolved ``config`` on ``requests``,
    training on ``device``."""
    keys = _keys_check(method)
    if not keys.passed:     # the strategy cannot be built with its declared keys: nothing runs
        return [keys]
    sequence = [{"kind": kind, "task": task} for kind, task in requests]
    test_stream = build_benchmark(config["benchmark"], seed=seed, n_tasks=config["n_tasks"],
                                  train_per_task=config.get("train_per_task")).test_stream
    full, tracker = _Recorder(test_stream), ProvenanceTracker()
    with tempfile.TemporaryDirectory() as folder:
        checkpoint = Path(folder) / "run.ckpt"
        record = run_record(method, seed, config, requests=sequence, plugins=[full, tracker],
                            device=device)
        with contextlib.suppress(_Stop):
            run_record(method, seed, config, requests=sequence, checkpoint=checkpoint,
                       plugins=[_Recorder(test_stream, stop_at=2)], device=device)
        resumed = _Recorder(test_stream)
        again = run_record(method, seed, config, requests=sequence, checkpoint=checkpoint,
                           plugins=[resumed], device=device)
    checks = [keys]
    failed = [c for c in record["learning_checks"] if c["failed"]]
    checks.append(Check("learns", not failed, "every learned task above chance on its training "
                        "data" if not failed else "left at chance: " + ", ".join(
                            f"task {c['task']} ({c['train_balanced_accuracy']:.1f} %)"
                            for c in failed)))
    checks.append(Check("lifecycle", full.events == list(requests),
                        f"after_request events {full.events}, requests {list(requests)}"))
    same = again["accuracy"] == record["accuracy"] and _same(resumed.params[-1],
                                                             full.params[-1])
    checks.append(Check("resume", same and again["resumed_after"] == [1],
                        f"resumed after requests {again['resumed_after']}; accuracy matrix and "
                        f"parameters {'bit-identical' if same else 'DIFFER'}"))
    checks.append(_optimizer_check(method, config, seed, device))
    if exact:
        checks += _exactness_checks(method, config, full, record, tracker, requests)
    return checks


def constructor_keywords(cls: type) -> set[str]:
    """The keyword parameters ``cls(...)`` accepts: those of its ``__init__`` and, while an
    ``__init__`` passes ``**kwargs`` on, of its bases' (along the method resolution order)."""
    accepted: set[str] = set()
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        parameters = inspect.signature(klass.__init__).parameters.values()
        accepted |= {p.name for p in parameters
                     if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)} - {"self"}
        if not any(p.kind is p.VAR_KEYWORD for p in parameters):
            break
    return accepted


def _keys_check(method: str) -> Check:
    """The keys the method declares, each a keyword parameter of its strategy's
    constructor."""
    spec = METHODS[method]
    declared = list(spec.info.keys)
    missing = [k for k in declared if k not in constructor_keywords(spec.strategy)]
    return Check("keys", not missing,
                 f"{len(declared)} declared keys, each a keyword of "
                 f"{spec.strategy.__name__}(...)" if not missing else
                 f"declared but not taken by {spec.strategy.__name__}(...): {', '.join(missing)}")


def _optimizer_check(method: str, config: dict, seed: int, device: str) -> Check:
    """Two learning requests with Avalanche's LRSchedulerPlugin(StepLR(halving)) on the
    strategy's own optimizer: the same object trains, at lr · 0.5^epoch in every request."""
    rates = _EpochRates()
    built = build_run(method, config, seed=seed, plugins=[rates], device=device)
    benchmark, strategy = built.benchmark, built.strategy
    optimizer = strategy.optimizer
    strategy.plugins.insert(0, LRSchedulerPlugin(torch.optim.lr_scheduler.StepLR(
        optimizer, step_size=1, gamma=0.5)))
    for exp in benchmark.train_stream[:2]:
        strategy.train(exp)
    expected = [config["lr"] * 0.5 ** e for e in range(config["epochs"])]
    ok = (strategy.optimizer is optimizer and rates.optimizers == {id(optimizer)}
          and all(len(r) == len(expected) and all(abs(a - b) <= 1e-12 * b
                                                  for a, b in zip(r, expected, strict=True))
                  for r in rates.rates))
    return Check("optimizer", ok, f"learning rates per epoch {rates.rates} (StepLR halving from "
                 f"{config['lr']:g}); {len(rates.optimizers)} optimizer object(s) stepped, "
                 f"{'the user' if strategy.optimizer is optimizer else 'NOT the user'}'s")


def _exactness_checks(method: str, config: dict, full: _Recorder, record: dict,
                      tracker: ProvenanceTracker, requests: Sequence[tuple[str, int]]
                      ) -> list[Check]:
    """Unlearning the last request's task (``requests[-1]``): at chance, and the remaining
    tasks' predictions unchanged (or, retraining from scratch, every parameter re-drawn); the
    provenance tracker's verdict where it tracks the method."""
    _, task = requests[-1]
    accuracy = record["accuracy"][-1][task]
    after_learning = record["accuracy"][
        max(i for i, r in enumerate(requests) if r == (RequestKind.LEARN, task))][task]
    level = 100 / record["split"]["classes_per_task"]
    # a never-trained head on trained shared weights scores anywhere around chance (a single
    # run cannot tell more; the audit compares distributions): forgotten = at most half of the
    # gain over chance the task had right after it was learned is left
    bound = level + max(after_learning - level, 0) / 2
    chance = accuracy <= bound
    learned = {t for k, t in requests if k == RequestKind.LEARN}
    others = sorted(learned - {t for k, t in requests if k == RequestKind.UNLEARN})
    if METHODS[method].strategy.retrains_from_scratch():
        redrawn = all(bool((a != b).all()) for a, b in zip(full.params[-1], full.params[-2],
                                                            strict=True))
        kept, how = redrawn, "every parameter re-drawn and retrained" if redrawn else \
            "a parameter entry SURVIVED the retraining from scratch"
    else:
        kept = all(torch.equal(full.logits[-1][t], full.logits[-2][t]) for t in others)
        how = (f"the remaining tasks' {others} predictions "
               + ("bit-identical" if kept else "CHANGED"))
    checks = [Check("exact", chance and kept,
                    f"unlearned task {task} at {accuracy:.1f} % ("
                    + ("at most" if chance else "ABOVE") + f" {bound:.1f} %: chance "
                    f"{level:.0f} % plus half its gain after learning, {after_learning:.1f} %); "
                    f"{how}")]
    if tracker.results is not None:
        result = tracker.results[-1]
        checks.append(Check("provenance", result["direct_pass"],
                            f"{result['direct_entries']} entries trained with task {task}'s "
                            f"data or buffer, {result['direct_missed']} not re-drawn"))
    return checks
