"""What rides along the audit's runs (``run_record(..., probe=...)``): the code whose output
the audit's records hold. Its own module, apart from the analysis, so that a record's code
fingerprint (:mod:`pall_avalanche.runs.fingerprint`) covers what wrote the record and not how
it is analysed later.

- :class:`AuditProbe` (Eq. 1's runs): the final model's logits on the unlearned tasks'
  training and test inputs (and on the first one's training inputs right after its unlearning
  request), the provenance check, the relearning attack's curves;
- :class:`ShadowProbe` (the shadow runs): the final model's logits on all of D^t and which
  half trained, every example's margin, and :class:`RetainedExposure`'s margins of the
  remaining tasks' training examples around the unlearning request with their buffer members;
- :class:`CanaryProbe` (the canary runs): the final model's logits on every canary (those its
  training included and the others), and which were included;
- :class:`StateProbe` (the data-swap pairs): the strategy's whole state right after the
  audited unlearning request, entry by entry.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from avalanche.models.utils import avalanche_forward

from pall_avalanche.audit.provenance import ProvenanceTracker
from pall_avalanche.audit.relearn import relearning_curves
from pall_avalanche.data.tasks import unshuffled_batches
from pall_avalanche.strategies.base import UnlearningPlugin, UnlearningTemplate

__all__ = ["AuditProbe", "CanaryProbe", "RetainedExposure", "ShadowProbe", "StateProbe",
           "decode_state", "head_logits", "margins", "model_logits"]


@torch.no_grad()
def model_logits(strategy: UnlearningTemplate, dataset, n_tasks: int) -> dict[str, list]:
    """The model's logits under every head (eval mode, evaluation transform; the model's mode
    is restored) on every input of ``dataset``, rounded to 5 decimals, with the labels:
    ``{"logits", "y"}``."""
    batch = strategy.eval_mb_size or strategy.train_mb_size
    data = dataset.eval()
    x = torch.stack([data[i][0] for i in range(len(data))]).to(strategy.device)
    y = [int(data[i][1]) for i in range(len(data))]
    model = strategy.model
    was_training = model.training
    model.eval()
    logits = torch.cat([torch.cat([model(x[i:i + batch], h) for i in range(0, len(x), batch)])
                        for h in range(n_tasks)], dim=1)
    model.train(was_training)
    return {"logits": np.round(logits.cpu().numpy(), 5).tolist(), "y": y}


class AuditProbe:
    """Rides along one run (``run_record(..., probe=AuditProbe(tasks))``): its plugin tracks
    provenance; :meth:`finish` returns the JSON-ready probe of the final model.

    :param tasks: the unlearned tasks whose inputs are probed.
    :param relearn: also run the relearning attack (the reference oracles' curves are never
        compared, so they skip it).
    :param at: request index → the labels of the times it stands for: the logits on the
        first task's training inputs are also kept at the end of those requests
        (``outputs_at``; as :class:`ShadowProbe`'s ``at``).
    """

    def __init__(self, tasks: Sequence[int], relearn: bool = True,
                 at: dict[int, list[str]] | None = None) -> None:
        self.tasks = list(tasks)
        self.relearn = relearn
        self.tracker = ProvenanceTracker()
        self.timed = _TargetLogits(dict(at or {}))
        self.plugins = [self.tracker, self.timed]

    def start(self, benchmark) -> None:
        """Hold the first probed task's training inputs for the timed logits."""
        self.timed.targets = benchmark.train_stream[self.tasks[0]].dataset
        self.timed.n_tasks = benchmark.split.n_tasks

    def finish(self, strategy: UnlearningTemplate, benchmark) -> dict[str, Any]:
        """The final model's logits (every head) on each probed task's training and test
        inputs, the provenance results and the relearning curves of each probed task
        (:func:`~pall_avalanche.audit.relearn.relearning_curves`)."""
        n_tasks = benchmark.split.n_tasks
        outputs = {str(t): {"train": model_logits(strategy, benchmark.train_stream[t].dataset,
                                                  n_tasks),
                            "test": model_logits(strategy, benchmark.test_stream[t].dataset,
                                                 n_tasks)}
                   for t in self.tasks}
        out = {"outputs": outputs, "provenance": self.tracker.results,
               "outputs_at": {label: {str(self.tasks[0]): {"train": logits}}
                              for label, logits in self.timed.results.items()}}
        if self.relearn:
            out["relearn"] = {str(t): relearning_curves(
                strategy.model, benchmark.train_stream[t].dataset,
                benchmark.test_stream[t].dataset, t) for t in self.tasks}
        return out


@torch.no_grad()
def head_logits(model: torch.nn.Module, dataset, task: int, batch_size: int,
                device: torch.device | str) -> tuple[np.ndarray, np.ndarray]:
    """(logits of ``task``'s head, labels) of every example of ``dataset`` in order (eval
    mode; the model's mode is restored)."""
    was_training = model.training
    model.eval()
    logits, labels = [], []
    for x, y in unshuffled_batches(dataset, batch_size, device):
        logits.append(avalanche_forward(model, x, task).cpu())
        labels.append(y.cpu())
    model.train(was_training)
    return torch.cat(logits).double().numpy(), torch.cat(labels).numpy()


def margins(logits: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per example, its label's logit minus the largest other logit (KLoM's margin)."""
    logits = np.asarray(logits, dtype=np.float64)
    rows = np.arange(len(logits))
    others = logits.copy()
    others[rows, y] = -np.inf
    return logits[rows, y] - others.max(axis=1)


class RetainedExposure(UnlearningPlugin):
    """Rides along a shadow run: keeps each learned task's training dataset, and right before
    and right after an unlearning request the margins (:func:`margins`, rounded to 5
    decimals) of every remaining task's training examples under its own head, with the
    positions of its buffer members when the strategy keeps an episodic memory
    (``results``: task → ``before``, ``after``, ``buffer``)."""

    def __init__(self) -> None:
        super().__init__()
        self.datasets: dict[int, Any] = {}
        self.results: dict[str, dict[str, list]] = {}

    def after_training_exp(self, strategy, **kwargs) -> None:
        self.datasets[strategy.experience.task_label] = strategy.experience.dataset

    def _confidences(self, strategy, when: str, unlearned: int) -> None:
        for task in strategy.active_tasks:
            if task == unlearned:
                continue
            logits, y = head_logits(strategy.model, self.datasets[task], task,
                                    strategy.eval_mb_size or strategy.train_mb_size,
                                    strategy.device)
            cell = self.results.setdefault(str(task), {})
            cell[when] = np.round(margins(logits, y), 5).tolist()

    def before_unlearning(self, strategy, task: int, **kwargs) -> None:
        self._confidences(strategy, "before", task)

    def after_unlearning(self, strategy, task: int, **kwargs) -> None:
        self._confidences(strategy, "after", task)
        memory = getattr(strategy, "memory", None)
        for key, cell in self.results.items():
            indices = getattr(memory, "indices", {}).get(int(key))
            cell["buffer"] = None if indices is None else [int(i) for i in indices]


class _TargetLogits(UnlearningPlugin):
    """Records the model's logits (every head) on the audit targets at the end of the
    requests of given indices (``results``: time label → :func:`model_logits`)."""

    def __init__(self, at: dict[int, list[str]]) -> None:
        super().__init__()
        self.at = at
        self.targets, self.n_tasks = None, 0
        self.results: dict[str, dict[str, list]] = {}

    def after_request(self, strategy, result, **kwargs) -> None:
        labels = self.at.get(result.index, ())
        if labels:
            logits = model_logits(strategy, self.targets, self.n_tasks)
            self.results.update(dict.fromkeys(labels, logits))


class ShadowProbe:
    """Rides along a shadow run: :meth:`finish` returns the final model's logits (every head)
    on the whole training set of the halved task and which of its examples were trained on,
    the same logits at the end of the requests ``at`` names (``targets_at``: the model right
    after an unlearning request, or the oracle's at the aligned request), every example's
    margin under its own task's head (``margins``: the halved task's training examples, the
    other tasks' training examples, every task's test examples; KLoM,
    :mod:`~pall_avalanche.audit.exposure`) and what its :class:`RetainedExposure` plugin saw
    around the unlearning request (``retained``).

    :param task: the audited (halved) task.
    :param at: request index → the labels of the times it stands for (the same label for a
        run of R and the aligned request of a run of R′).
    """

    def __init__(self, task: int, at: dict[int, list[str]] | None = None) -> None:
        self.task = task
        self.exposure = RetainedExposure()
        self.timed = _TargetLogits(dict(at or {}))
        self.plugins: list = [self.exposure, self.timed]

    def start(self, benchmark) -> None:
        """Hold the audit targets (the whole audited task's training set) for the timed
        probes."""
        self.timed.targets, self.timed.n_tasks = benchmark.audit_targets, benchmark.split.n_tasks

    def finish(self, strategy, benchmark) -> dict[str, Any]:
        """What a shadow run records at its end: the final model's logits on the audit
        targets, which of them were members, and the margins under their own heads of the
        targets, the remaining tasks' training examples and every test set."""
        batch = strategy.eval_mb_size or strategy.train_mb_size
        others = [t for t in range(benchmark.split.n_tasks) if t != self.task]

        def margin_lists(datasets: Sequence[tuple[int, Any]]) -> list[list[float]]:
            return [np.round(margins(*head_logits(strategy.model, data, task, batch,
                                                  strategy.device)), 5).tolist()
                    for task, data in datasets]

        return {"task": self.task,
                "targets": model_logits(strategy, benchmark.audit_targets,
                                        benchmark.split.n_tasks),
                "targets_at": self.timed.results,
                "members": list(benchmark.split.shadow["members"]),
                "margins": {
                    "forget": margin_lists([(self.task, benchmark.audit_targets)]),
                    "retain": margin_lists([(t, benchmark.train_stream[t].dataset)
                                            for t in others]),
                    "test": margin_lists([(t, exp.dataset) for t, exp
                                          in enumerate(benchmark.test_stream)])},
                "retained": self.exposure.results}


class CanaryProbe:
    """Rides along a canary run (:func:`~pall_avalanche.data.tasks.with_canaries`):
    :meth:`finish` returns the final model's logits (every head) on every canary, which were
    included (``members``) and the same logits at the end of the requests ``at`` names
    (``targets_at``, as :class:`ShadowProbe`'s).

    :param task: the task the canaries joined.
    :param at: request index → the labels of the times it stands for.
    """

    def __init__(self, task: int, at: dict[int, list[str]] | None = None) -> None:
        self.task = task
        self.timed = _TargetLogits(dict(at or {}))
        self.plugins: list = [self.timed]

    def start(self, benchmark) -> None:
        """Hold the canaries for the timed probes."""
        self.timed.targets, self.timed.n_tasks = (benchmark.audit_canaries,
                                                  benchmark.split.n_tasks)

    def finish(self, strategy, benchmark) -> dict[str, Any]:
        """What a canary run records at its end."""
        return {"task": self.task,
                "targets": model_logits(strategy, benchmark.audit_canaries,
                                        benchmark.split.n_tasks),
                "targets_at": self.timed.results,
                "members": list(benchmark.split.canaries["members"])}


def _leaves(state: Any, prefix: str = "") -> dict[str, Any]:
    """Every leaf of a checkpoint state by its path (``model/net.head.weight``)."""
    if isinstance(state, dict):
        return {k: v for key, value in state.items()
                for k, v in _leaves(value, f"{prefix}{key}/").items()}
    if isinstance(state, (list, tuple)) and any(isinstance(v, (dict, list, tuple, torch.Tensor))
                                                for v in state):
        return {k: v for i, value in enumerate(state)
                for k, v in _leaves(value, f"{prefix}{i}/").items()}
    return {prefix.rstrip("/"): state}


def _encoded(value: Any) -> Any:
    """A leaf as JSON: a tensor as its dtype, shape and raw bytes (base64: compared bit for
    bit), anything else as it is (or its ``repr``)."""
    if isinstance(value, torch.Tensor):
        array = value.detach().cpu().contiguous()
        if array.dtype == torch.bfloat16:
            array = array.float()
        data = array.numpy()
        return {"dtype": str(data.dtype), "shape": list(data.shape),
                "bytes": base64.b64encode(data.tobytes()).decode("ascii")}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_encoded(v) for v in value]
    return repr(value)


def decode_state(encoded: dict[str, Any]) -> dict[str, Any]:
    """:class:`StateProbe`'s state back as path → numpy array (tensors) or plain value."""
    def one(value: Any) -> Any:
        if isinstance(value, dict) and set(value) == {"dtype", "shape", "bytes"}:
            return np.frombuffer(base64.b64decode(value["bytes"]),
                                 dtype=value["dtype"]).reshape(value["shape"])
        return value
    return {path: one(value) for path, value in encoded.items()}


class _StateAt(UnlearningPlugin):
    """Keeps the strategy's whole state (:meth:`~pall_avalanche.strategies.base.
    UnlearningTemplate.checkpoint_state`: model, strategy attributes, plugins' state) at the
    end of the request of index ``at``, every leaf encoded (``result``); the request log's
    results, which report what was measured while learning, are left out."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at
        self.result: dict[str, Any] | None = None

    def after_request(self, strategy, result, **kwargs) -> None:
        if result.index == self.at:
            state = strategy.checkpoint_state()
            state["strategy"].pop("request_log.results", None)
            self.result = {path: _encoded(v) for path, v in _leaves(state).items()}


class StateProbe:
    """Rides along a run of a data-swap pair (two runs identical but for the audited task's
    training data): :meth:`finish` returns the strategy's whole state right after the
    request of index ``at`` (the audited unlearning request), leaf by leaf
    (:func:`decode_state` reads it back).

    :param at: the index of the request after which the state is kept.
    """

    def __init__(self, at: int) -> None:
        self.state = _StateAt(at)
        self.plugins = [self.state]

    def finish(self, strategy, benchmark) -> dict[str, Any]:
        """The kept state (None when the request never ran)."""
        return {"at": self.state.at, "state": self.state.result}
