"""The unlearning template every method builds on.

:class:`UnlearningTemplate` is an Avalanche ``SupervisedTemplate`` that also accepts
:class:`~pall_avalanche.requests.streams.UnlearnExperience` requests: ``train(exp)`` routes them to
``unlearn(task)``, which fires the plugin events ``before_unlearning`` and
``after_unlearning`` around the method's own ``_unlearn`` step, so metrics, loggers and
method plugins react to unlearning like to any other event.

Every request ends in one event, ``after_request(strategy, result)``, fired once the request
is over (every plugin of it done) with its :class:`~pall_avalanche.core.RequestResult`: the
request's measurement (:func:`~pall_avalanche.evaluation.unlearning_metrics` in the
evaluator, which hands it over with :meth:`UnlearningTemplate.request_measured`) plus the
method's own :meth:`UnlearningTemplate.request_statistics`. Records, checkpoints, W&B and
the audit subscribe to it.

A diverged request never reaches ``after_request``: the template raises
:class:`~pall_avalanche.core.DivergedError` (naming the request, the epoch and what is not
finite) when a training epoch had a non-finite loss (checked once per epoch: the loss's
finiteness is accumulated on the device, with no host synchronisation per step), when the
unlearning steps of :meth:`UnlearningTemplate.optimization_steps` had one (checked once per
loop), or when a parameter is not finite at the end of the request (every request, learning
and unlearning).

Conventions shared by all methods (docs/fidelity.md, "Baselines"):

- ``active_tasks`` is Ω in learning order: a task joins after its training experience
  (before the ``after_training_exp`` plugins run) and leaves before ``_unlearn`` runs.
- Every learning request starts from fresh optimizer state (no momentum or Adam state is
  carried over) in the very optimizer object given to the constructor
  (:meth:`UnlearningTemplate.renew_optimizer`), so a scheduler the user or Avalanche's
  ``LRSchedulerPlugin`` holds keeps driving the learning rate that trains; retraining loops
  (no scheduler, as in the paper) get a separate one from
  :meth:`UnlearningTemplate.fresh_optimizer`.
- ``lr_schedule="cosine"`` anneals the learning rate per epoch with torch's
  ``CosineAnnealingLR`` in Avalanche's ``LRSchedulerPlugin``, from the base rate over each
  training phase of a request (:meth:`UnlearningTemplate.training_phases`: one phase by
  default; LwF's and LSF's warm-up and full training, PackNet's training and fine-tuning
  each anneal on their own, as the paper's reference does).
- Evaluating never changes training: :meth:`UnlearningTemplate.eval` and the request
  measurement draw nothing from the random streams training uses, so extra metrics, loggers
  or ``eval()`` calls leave every parameter bit-identical.
- A learning request trains one parameter group, as the user's optimizer usually has: a
  scheduler made for it keeps one base rate per group it saw (``LambdaLR`` and ``OneCycleLR``
  refuse a different number of groups), so per-parameter differences such as weight decay
  are applied to the gradients instead (:meth:`UnlearningTemplate.optimizer_param_groups`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

import torch
from avalanche.benchmarks.scenarios.generic_scenario import CLExperience
from avalanche.models.utils import avalanche_forward
from avalanche.training.plugins import LRSchedulerPlugin
from avalanche.training.templates import SupervisedTemplate
from avalanche.training.utils import trigger_plugins
from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import CosineAnnealingLR

from pall_avalanche.checkpoint import Stateful
from pall_avalanche.config import INPUT_PIPELINES
from pall_avalanche.core import DivergedError, RequestResult, UnlearningPlugin
from pall_avalanche.data.device import DeviceBatchLoader, device_images_of
from pall_avalanche.masks import mask_gradients_
from pall_avalanche.models import backbones, compile_backbones, count_parameters
from pall_avalanche.models.multitask import adapt_model
from pall_avalanche.requests.streams import UnlearnExperience

__all__ = ["AMP_MODES", "INPUT_PIPELINES", "LR_SCHEDULES", "DivergedError", "UnlearningPlugin",
           "UnlearningTemplate"]

LR_SCHEDULES = ("constant", "cosine")
#: Mixed precision of the training forward passes: none, or bfloat16 autocast.
AMP_MODES = (None, "bf16")


def _and_finite(flag: torch.Tensor | None, loss: torch.Tensor) -> torch.Tensor:
    """``flag`` (``None``: true) and whether ``loss`` is finite, as a bool tensor on the loss's
    device (no host synchronisation)."""
    finite = torch.isfinite(loss.detach()).all()
    return finite if flag is None else flag & finite


class UnlearningTemplate(SupervisedTemplate, Stateful):
    """Avalanche supervised template with task unlearning.

    Between requests its whole state is :meth:`checkpoint_state`: the model's
    ``state_dict``, the strategy's ``checkpoint_attributes`` (subclasses add theirs) and every
    stateful plugin's ``state_dict`` (optimizers are fresh per request and not saved).

    Takes every keyword argument of ``SupervisedTemplate`` (keyword-only), plus:

    :param lr_schedule: ``"constant"`` (default) or ``"cosine"`` (per-epoch annealing within
        each learning request, torch's ``CosineAnnealingLR`` in Avalanche's
        ``LRSchedulerPlugin``; the paper's TinyImageNet schedule).
    :param amp: ``"bf16"``: the learning requests' training forward passes run under bfloat16
        autocast (weights, gradients, optimizer state, masks and every exactness property stay
        as in float32: frozen entries get exactly-zero gradients either way); ``None``: float32.
    :param channels_last: keep the model and 4-d inputs in channels-last memory layout (a
        speed option; results equal up to floating-point reduction order).
    :param compile: ``torch.compile`` the backbones in place, once, with torch's default
        backend (:func:`~pall_avalanche.models.compile_backbones`; a speed option for GPUs:
        results equal eager ones up to floating-point reduction order; the first steps pay
        the compilation). The head, the masks and the task routing stay eager. A model
        without a module named ``backbone`` is refused.
    :param input_pipeline: ``"batched"`` (default): a learning experience whose dataset
        carries its images on the device (``device_images``, the image benchmarks:
        :mod:`pall_avalanche.data.device`) is trained from batches drawn and augmented there;
        any other dataset through a ``DataLoader`` of its per-sample transforms, as
        Avalanche does. ``"per_sample"``: always the ``DataLoader``.
    :param n_tasks: the number of tasks T, for an Avalanche model with a
        ``MultiHeadClassifier`` (``MTSimpleMLP``, ``as_multitask(model, "classifier")``, ...),
        which is wrapped in a :class:`~pall_avalanche.models.multitask.MultiHeadNet` with the
        heads of all T tasks; a :class:`~pall_avalanche.models.TaskIncrementalNet` knows its T.
    """

    PLUGIN_CLASS = UnlearningPlugin
    checkpoint_attributes = ("active_tasks", "clock.train_iterations", "clock.train_exp_counter",
                             "clock.total_iterations")
    #: Whether the method wants per-task token parameters in backbones that have them
    #: (ViT's CLS token and positional embedding; docs/fidelity.md, "Models").
    per_task_tokens: bool = False

    def __init__(self, *, model: nn.Module, optimizer: Optimizer,
                 criterion: nn.Module | None = None, lr_schedule: str = "constant",
                 amp: str | None = None, channels_last: bool = False,
                 input_pipeline: str = "batched", compile: bool = False,
                 n_tasks: int | None = None, **kwargs) -> None:
        if lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"lr_schedule={lr_schedule!r} is invalid; valid: {LR_SCHEDULES}")
        if amp not in AMP_MODES:
            raise ValueError(f"amp={amp!r} is invalid; valid: {AMP_MODES}")
        if input_pipeline not in INPUT_PIPELINES:
            raise ValueError(f"input_pipeline={input_pipeline!r} is invalid; valid: "
                             f"{INPUT_PIPELINES}")
        self.amp = amp
        self.input_pipeline = input_pipeline
        self.channels_last = bool(channels_last)
        plugins = list(kwargs.pop("plugins", None) or [])
        #: the cosine preset's plugin (torch's cosine annealing through Avalanche's plugin,
        #: restarted from the base rate by :meth:`start_phase`); ``None`` without it
        self._cosine: LRSchedulerPlugin | None = None
        if lr_schedule == "cosine":
            self._cosine = LRSchedulerPlugin(
                CosineAnnealingLR(optimizer, T_max=kwargs.get("train_epochs", 1)),
                step_granularity="epoch", reset_scheduler=True, reset_lr=True)
            plugins.insert(0, self._cosine)
        super().__init__(model=adapt_model(model, n_tasks), optimizer=optimizer,
                         criterion=nn.CrossEntropyLoss() if criterion is None else criterion,
                         plugins=plugins, **kwargs)
        self.compile_backbone = bool(compile)
        if self.compile_backbone and not backbones(self.model):
            raise ValueError(f"compile=True: model {type(self.model).__name__} has no module "
                             "named 'backbone' to compile (the built-in networks have one); "
                             "compile your model's feature layers yourself instead")
        self._optimizer_class = type(optimizer)
        self._optimizer_defaults = dict(optimizer.defaults)
        self.active_tasks: list[int] = []
        self.lr_schedule = lr_schedule
        self._statistics: dict = {}
        self._measured: RequestResult | None = None
        #: (index, kind, task) of the request in progress, for :class:`DivergedError`.
        self._request: tuple[int, str, int] | None = None
        #: Whether every training loss of the epoch in progress was finite (on the device).
        self._loss_finite: torch.Tensor | None = None

    # ------------------------------------------------------------------ requests
    def train(self, experiences: CLExperience | Iterable[CLExperience],
              eval_streams=None, **kwargs):
        """Process learning experiences and unlearning requests in order."""
        batch = [experiences] if isinstance(experiences, CLExperience) else list(experiences)
        for exp in batch:
            if isinstance(exp, UnlearnExperience):
                self.unlearn(exp.task_label)
                continue
            task = getattr(exp, "task_label", None)
            if task is None:
                raise ValueError(
                    f"experience {exp!r} has no single task label; task-incremental strategies "
                    "need one task per learning experience"
                )
            if task in self.active_tasks:
                raise ValueError(
                    f"task {task} is already learned (active tasks {self.active_tasks}); "
                    "unlearn it before learning it again"
                )
            self._start_request("learn", task)
            super().train(exp, eval_streams, **kwargs)
            self._end_request()
        return self.evaluator.get_last_metrics()

    def eval(self, exp_list, **kwargs):
        """Avalanche's evaluation, with the random streams training uses (torch's CPU and
        device generators) restored afterwards: iterating a ``DataLoader`` draws a seed from
        them, so without this an extra evaluation, metric or logger would change the training
        that follows."""
        devices = ([torch.device(self.device)] if torch.device(self.device).type == "cuda"
                   else [])
        with torch.random.fork_rng(devices=devices):
            return super().eval(exp_list, **kwargs)

    def forward(self):
        """The mini-batch's forward pass (:meth:`forward_inputs` of ``mb_x``)."""
        return self.forward_inputs(self.mb_x)

    def forward_inputs(self, x: torch.Tensor) -> torch.Tensor:
        """Logits of inputs ``x`` of the current experience (the mini-batch, or inputs derived
        from it). An experience holds one task, so its label goes to the model as an ``int``:
        no per-batch host-device sync to split the batch by task; an experience of several
        tasks uses the mini-batch's task labels (``x`` must then be ``mb_x``-sized). With
        ``amp="bf16"`` it runs under bfloat16 autocast and returns float32 logits (the loss,
        the backward pass and the weights stay float32)."""
        labels = getattr(self.experience, "task_labels", None)
        task = int(labels[0]) if labels is not None and len(labels) == 1 else self.mb_task_id
        with torch.autocast(torch.device(self.device).type, dtype=torch.bfloat16,
                            enabled=self.amp == "bf16"):
            out = avalanche_forward(self.model, x, task)
        return out.float()

    def make_train_dataloader(self, num_workers=0, shuffle=True, pin_memory=None,
                              persistent_workers=False, drop_last=False, **kwargs) -> None:
        """Avalanche's training ``DataLoader``, or, with ``input_pipeline="batched"`` and a
        dataset that carries ``device_images``, a
        :class:`~pall_avalanche.data.device.DeviceBatchLoader` on the strategy's device (the
        worker and pinning arguments do not apply to it)."""
        source = device_images_of(self.adapted_dataset)
        if self.input_pipeline == "per_sample" or source is None:
            super().make_train_dataloader(num_workers=num_workers, shuffle=shuffle,
                                          pin_memory=pin_memory,
                                          persistent_workers=persistent_workers,
                                          drop_last=drop_last, **kwargs)
            return
        self.dataloader = DeviceBatchLoader(source, self.train_mb_size, self.device,
                                            shuffle=shuffle, drop_last=drop_last)

    def _unpack_minibatch(self) -> None:
        super()._unpack_minibatch()
        if self.channels_last and self.mbatch[0].dim() == 4:
            self.mbatch[0] = self.mbatch[0].contiguous(memory_format=torch.channels_last)

    def unlearn(self, task: int) -> None:
        """Unlearn ``task``: plugins' ``before_unlearning``, the method's ``_unlearn``,
        plugins' ``after_unlearning``."""
        if task not in self.active_tasks:
            raise ValueError(
                f"cannot unlearn task {task}: it is not learned (active tasks "
                f"{self.active_tasks})"
            )
        self.model.to(self.device)
        self._start_request("unlearn", task)
        trigger_plugins(self, "before_unlearning", task=task)
        self.active_tasks.remove(task)
        self._unlearn(task)
        trigger_plugins(self, "after_unlearning", task=task)
        self._end_request()

    def request_statistics(self) -> dict:
        """The method's own figures about the request in progress or just finished (name →
        JSON-ready value; e.g. PALL's re-drawn and retrained entries, Table A2). Empty by
        default; a method fills ``self._statistics`` during the request."""
        return dict(self._statistics)

    def trains_head_only(self) -> bool:
        """Whether the current training phase trains only the task's head rows (the warm-up of
        LwF and LSF); penalties on the shared weights skip it. Default: no."""
        return False

    @classmethod
    def retrains_from_scratch(cls) -> bool:
        """Whether unlearning re-draws the whole model and retrains it from what remains
        (ER (Retraining)): the other tasks' predictions change, no parameter survives. The
        contract check of exact methods (:mod:`pall_avalanche.check_method`) asks. Default:
        no."""
        return False

    def stores_logits(self) -> bool:
        """Whether the method keeps logits computed by the model (DER++ and PALL's buffers):
        an audit of exact unlearning checks that none was computed with an unlearned task's
        weights. Default: no."""
        return False

    def request_measured(self, result: RequestResult,
                         accepted: Callable[[RequestResult], Any] | None = None) -> None:
        """Hand over the measurement of the request in progress (called once per request by
        :class:`~pall_avalanche.evaluation.UnlearningMetrics`); when the request is over and
        its parameters are finite, the template calls ``accepted(result)`` (the metric's
        request log keeps it) and then fires ``after_request`` with it."""
        self._measured = (result, accepted)

    def requests_done(self) -> int:
        """The number of requests finished so far: every learning request adds its task to
        ``active_tasks`` and counts on Avalanche's clock (``clock.train_exp_counter``), every
        unlearning request removes one, so 2 × learned − |Ω| (between requests)."""
        return 2 * self.clock.train_exp_counter - len(self.active_tasks)

    def _start_request(self, kind: str, task: int) -> None:
        self._statistics, self._measured = {}, None
        self._request = (self.requests_done(), kind, task)

    def _diverged(self, what: str, epoch: int | None = None) -> DivergedError:
        return DivergedError(*self._request, what, epoch)

    def _end_request(self) -> None:
        """Check that every parameter is finite (else raise :class:`DivergedError`), then fire
        ``after_request`` on every plugin with the request's measured result (none when the
        evaluator does not measure requests)."""
        finite = torch.stack([p.detach().isfinite().all() for p in self.model.parameters()])
        if not bool(finite.all()):
            name = next(n for (n, _), ok in zip(self.model.named_parameters(), finite.tolist(),
                                                 strict=True) if not ok)
            raise self._diverged(f"parameter {name!r} at the end of the request")
        measured, self._measured = self._measured, None
        if measured is not None:
            result, accepted = measured
            if accepted is not None:
                accepted(result)
            trigger_plugins(self, "after_request", result=result)

    def _unlearn(self, task: int) -> None:
        """The method's unlearning step, with ``task`` already out of ``active_tasks``.
        The default changes nothing (Sequential); methods override it or act in plugins."""

    def _after_training_exp(self, **kwargs) -> None:
        self.active_tasks.append(self.experience.task_label)
        source = device_images_of(self.adapted_dataset)
        if source is not None:                  # the task's images leave the device
            source.release()
        super()._after_training_exp(**kwargs)

    def _before_training_epoch(self, **kwargs) -> None:
        self._loss_finite = None
        super()._before_training_epoch(**kwargs)

    def _after_training_iteration(self, **kwargs) -> None:
        self._loss_finite = _and_finite(self._loss_finite, self.loss)
        super()._after_training_iteration(**kwargs)

    def _after_training_epoch(self, **kwargs) -> None:
        """Raise :class:`DivergedError` if a training loss of the epoch was not finite (the
        epoch's one host synchronisation for it), before the plugins see the epoch end."""
        if self._loss_finite is not None and not bool(self._loss_finite):
            raise self._diverged("the training loss", self.clock.train_exp_epochs + 1)
        super()._after_training_epoch(**kwargs)

    # ---------------------------------------------------------- training phases
    def training_phases(self) -> list[int]:
        """The epochs of each training phase of the current learning request (they add up to
        ``train_epochs``). One phase by default; a method that trains in phases (LwF's
        warm-up, PackNet's fine-tuning) overrides it and calls :meth:`start_phase` when the
        next one starts."""
        return [self.train_epochs]

    def start_phase(self, epochs: int) -> None:
        """A training phase of ``epochs`` epochs starts: the cosine preset restarts from the
        base rate and anneals over those epochs (without the preset nothing changes; a
        scheduler of the user's own keeps its position)."""
        if self._cosine is None:
            return
        scheduler = self._cosine.scheduler
        for group, lr in zip(self.optimizer.param_groups, scheduler.base_lrs, strict=True):
            group["lr"] = lr
        scheduler.T_max = epochs
        scheduler.last_epoch = 0

    def _before_training_exp(self, **kwargs) -> None:
        super()._before_training_exp(**kwargs)
        self.start_phase(self.training_phases()[0])

    # ---------------------------------------------------------------- optimizers
    def optimizer_param_groups(self) -> list[dict]:
        """The parameter groups a learning request optimises (default: every trainable
        parameter, one group). Keep to one group: a scheduler of the user's optimizer knows the
        groups it saw (module docstring)."""
        return [{"params": [p for p in self.model.parameters() if p.requires_grad]}]

    def fresh_optimizer(self, param_groups: list[dict]) -> Optimizer:
        """A new optimizer of the constructor's class and hyper-parameters, with no state."""
        return self._optimizer_class(param_groups, **self._optimizer_defaults)

    def optimization_steps(self, param_groups: list[dict], n_iters: int,
                           loss: Callable[[], torch.Tensor], *,
                           trainable: list[torch.Tensor] | None = None) -> None:
        """The one optimisation loop of unlearning and retraining: ``n_iters`` steps of a
        fresh optimizer (:meth:`fresh_optimizer`, no scheduler) on ``loss()``, in train mode.

        :param param_groups: the optimizer's parameter groups.
        :param n_iters: the number of steps.
        :param loss: computes the loss of one step (draws its own minibatch).
        :param trainable: float 0/1 tensors shaped like the parameters of ``param_groups`` (in
            order): only their 1-entries change, and weight decay moves to the gradient (give
            those groups ``weight_decay=0``). ``None``: every entry is trained.
        :raises DivergedError: a step's loss was not finite (checked once, after the loop).
        """
        params = [p for group in param_groups for p in group["params"]]
        optimizer = self.fresh_optimizer(param_groups)
        self.model.train()
        finite = None
        for _ in range(n_iters):
            optimizer.zero_grad(set_to_none=True)
            value = loss()
            value.backward()
            finite = _and_finite(finite, value)
            if trainable is not None:
                mask_gradients_(params, trainable, self.weight_decay)
            optimizer.step()
        self.model.zero_grad(set_to_none=True)
        if finite is not None and not bool(finite):
            raise self._diverged("the loss of the unlearning and retraining steps")

    @property
    def weight_decay(self) -> float:
        """The weight decay of the constructor's optimizer."""
        return float(self._optimizer_defaults.get("weight_decay", 0.0))

    def make_optimizer(self, **kwargs) -> None:
        self.renew_optimizer(self.optimizer_param_groups())

    def renew_optimizer(self, param_groups: list[dict]) -> None:
        """Give the optimizer the user passed (the object an LR scheduler or the user's own code
        holds) fresh state for a new phase of training: no momentum or Adam moments carried
        over, ``param_groups`` as its groups, each with the constructor's hyper-parameters and
        the learning rate the optimizer has now (so a scheduler's value carries over)."""
        optimizer = self.optimizer
        current = {key: optimizer.param_groups[0][key] for key in ("lr", "initial_lr")
                   if optimizer.param_groups and key in optimizer.param_groups[0]}
        optimizer.state = defaultdict(dict)
        optimizer.param_groups = []
        for group in param_groups:
            optimizer.add_param_group({**current, **group})

    def check_model_and_optimizer(self, **kwargs) -> None:
        """Adapt the model to the experience (in channels-last layout and with its backbone
        compiled if asked), then build the request's fresh optimizer."""
        self.model = self.model_adaptation()
        if self.channels_last:
            self.model.to(memory_format=torch.channels_last)
        if self.compile_backbone:
            compile_backbones(self.model)
        self.make_optimizer()

    # --------------------------------------------------------------- checkpoints
    def _stateful_plugins(self) -> dict[str, Stateful]:
        """A stable name → every plugin, and every metric of the evaluator, with checkpoint
        attributes: the class's qualified name, with ``#2``, ``#3`` ... for further instances
        of one class (as Lightning keys callback state), so adding, removing or reordering
        other plugins keeps a checkpoint loadable; stateless ones (a progress or kill-switch
        plugin) may differ between the saved and the resumed run."""
        def stateful(items: Iterable, prefix: str) -> dict[str, Stateful]:
            out: dict[str, Stateful] = {}
            for p in items:
                if isinstance(p, Stateful) and p.all_checkpoint_attributes():
                    name = f"{prefix}{type(p).__module__}.{type(p).__qualname__}"
                    count = sum(key == name or key.startswith(f"{name}#") for key in out)
                    out[f"{name}#{count + 1}" if count else name] = p
            return out

        return {**stateful(self.plugins, ""),
                **stateful(getattr(self.evaluator, "metrics", ()), "metric ")}

    def checkpoint_state(self) -> dict:
        """The strategy's state between requests, as plain data: ``model`` (its
        ``state_dict``), ``strategy`` (:meth:`state_dict`) and ``plugins`` (stable name →
        ``state_dict``, the evaluator's stateful metrics included: :meth:`_stateful_plugins`)."""
        return {"model": self.model.state_dict(), "strategy": self.state_dict(),
                "plugins": {key: p.state_dict() for key, p in self._stateful_plugins().items()}}

    def restore_checkpoint_state(self, state: dict) -> None:
        """Restore :meth:`checkpoint_state` into a strategy built like the saved one.

        :param state: what :meth:`checkpoint_state` returned.
        """
        plugins = self._stateful_plugins()
        if sorted(plugins) != sorted(state["plugins"]):
            raise ValueError(f"the checkpoint's plugins {sorted(state['plugins'])} differ from "
                             f"this strategy's {sorted(plugins)}")
        self.model.load_state_dict(state["model"])
        self.load_state_dict(state["strategy"])
        for key, plugin in plugins.items():
            plugin.load_state_dict(state["plugins"][key])

    # --------------------------------------------------------------- model size
    def inference_size(self, n_tasks: int | None = None) -> tuple[int, int]:
        """(float parameters, mask bits) needed for inference.

        :param n_tasks: the size with that many active tasks (default: the active ones now);
            a dense model's size does not depend on it.
        """
        return count_parameters(self.model), 0

    def synchronize(self) -> None:
        """Wait for queued device work (for wall-clock timing)."""
        if torch.device(self.device).type == "cuda":
            torch.cuda.synchronize(self.device)
