"""The unlearning template every method builds on.

:class:`UnlearningTemplate` is an Avalanche ``SupervisedTemplate`` that also accepts
:class:`~pall_avalanche.requests.streams.UnlearnExperience` requests: ``train`` carries them
out with ``unlearn(task)``, which fires the plugin events ``before_unlearning`` and
``after_unlearning`` around the method's own ``_unlearn`` step, so metrics, loggers and
method plugins react to unlearning like to any other event. It is composed, as Avalanche
composes its templates, of mixin classes with one concern each (:mod:`pall_avalanche.
strategies.template`): the request lifecycle, task routing, optimisation, speed options and
state.

``train`` is the template's own request loop: it dispatches each request (a learning
experience to Avalanche's per-experience steps, an unlearning or make-permanent request to
``unlearn`` or ``make_permanent``), and every request ends in one event,
``after_request(strategy, result)``, fired once the request is over (every plugin of it done)
with its :class:`~pall_avalanche.core.RequestResult`, which the loop also adds to
:attr:`UnlearningTemplate.request_log`: the request's measurement when the evaluator has
:func:`~pall_avalanche.evaluation.unlearning_metrics` (handed over with
:meth:`UnlearningTemplate.request_measured`), else what the loop knows by itself, plus the
method's own :meth:`UnlearningTemplate.request_statistics`. Records, checkpoints, W&B and the
audit subscribe to it.

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
- Every learning request starts from fresh optimizer state in the very optimizer object
  given to the constructor; retraining loops get a separate fresh one
  (:mod:`~pall_avalanche.strategies.template.optimization`).
- ``lr_schedule="cosine"`` anneals the learning rate per epoch with torch's
  ``CosineAnnealingLR`` in Avalanche's ``LRSchedulerPlugin``, from the base rate over each
  training phase of a request (:meth:`UnlearningTemplate.training_phases`: one phase by
  default; LwF's and LSF's warm-up and full training, PackNet's training and fine-tuning
  each anneal on their own, as the paper's reference does).
- Every sample goes through its own task (:meth:`UnlearningTemplate.mb_tasks`), also in a
  mini-batch a plugin such as Avalanche's ``ReplayPlugin`` assembled from several tasks.
- Evaluating never changes training: :meth:`UnlearningTemplate.eval` and the request
  measurement draw nothing from the random streams training uses and never adapt the model,
  so extra metrics, loggers or ``eval()`` calls leave every parameter bit-identical.
"""

from __future__ import annotations

from avalanche.training.templates import SupervisedTemplate
from torch import nn
from torch.optim import Optimizer

from pall_avalanche.catalog import DENSE_SIZE
from pall_avalanche.checkpoint import Stateful
from pall_avalanche.core import DivergedError, UnlearningPlugin
from pall_avalanche.models import TaskIncrementalNet
from pall_avalanche.models.multitask import MultiHeadNet, TaskIncrementalRequired, adapt_model
from pall_avalanche.strategies.template.lifecycle import CurrentRequest, RequestLifecycle
from pall_avalanche.strategies.template.optimization import LR_SCHEDULES, Optimization
from pall_avalanche.strategies.template.permanence import Permanence
from pall_avalanche.strategies.template.routing import TaskRouting
from pall_avalanche.strategies.template.speed import AMP_MODES, INPUT_PIPELINES, SpeedOptions
from pall_avalanche.strategies.template.state import TemplateState

__all__ = ["AMP_MODES", "INPUT_PIPELINES", "LR_SCHEDULES", "CurrentRequest", "DivergedError",
           "SpeedOptions", "UnlearningPlugin", "UnlearningTemplate"]


class UnlearningTemplate(RequestLifecycle, Permanence, TaskRouting, Optimization,
                         TemplateState, SupervisedTemplate, Stateful):
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
        Avalanche does. ``"per_sample"``: always the ``DataLoader``. (These four are the
        strategy's :attr:`speed`, one :class:`SpeedOptions`.)
    :param n_tasks: optional, the number of tasks T, for an Avalanche model with a
        ``MultiHeadClassifier`` (``MTSimpleMLP``, ``as_multitask(model, "classifier")``, ...),
        which is wrapped in a :class:`~pall_avalanche.models.multitask.MultiHeadNet`: with it,
        the heads of all T tasks exist from the start and buffers are split over T a priori
        (the paper); without it, heads grow as tasks arrive, as in Avalanche, and a method
        that splits a buffer over T rebalances it instead (or, if it needs T, says so); a
        :class:`~pall_avalanche.models.TaskIncrementalNet` knows its T.

    The model must be task-incremental (a TaskIncrementalNet, or an Avalanche model with one
    ``MultiHeadClassifier``), else :class:`~pall_avalanche.models.multitask.
    TaskIncrementalRequired` is raised, one line the same for every strategy; so is a stream
    of class-incremental input, before its first learning experience trains
    (:meth:`check_requests`).
    """

    PLUGIN_CLASS = UnlearningPlugin
    checkpoint_attributes = ("active_tasks", "permanent_tasks", "made_permanent",
                             "request_log.results", "clock.train_iterations",
                             "clock.train_exp_counter", "clock.total_iterations")
    #: Whether the method wants per-task token parameters in backbones that have them
    #: (ViT's CLS token and positional embedding; docs/fidelity.md, "Models").
    per_task_tokens: bool = False
    #: Table 1's symbolic model size (one of
    #: :data:`~pall_avalanche.catalog.registration.MODEL_SIZES`), read when the class is
    #: declared (:class:`~pall_avalanche.catalog.Method`).
    table_size: str = DENSE_SIZE

    def __init__(self, *, model: nn.Module, optimizer: Optimizer,
                 criterion: nn.Module | None = None, lr_schedule: str = "constant",
                 amp: str | None = None, channels_last: bool = False,
                 input_pipeline: str = "batched", compile: bool = False,
                 n_tasks: int | None = None, **kwargs) -> None:
        #: The speed options (bf16 autocast, channels-last, compile, batched input).
        self.speed = SpeedOptions(amp=amp, channels_last=channels_last, compile=compile,
                                  input_pipeline=input_pipeline)
        plugins = list(kwargs.pop("plugins", None) or [])
        cosine = self._set_up_optimization(optimizer, lr_schedule, kwargs.get("train_epochs", 1))
        if cosine is not None:
            plugins.insert(0, cosine)
        model = adapt_model(model, n_tasks)
        if not any(isinstance(m, (TaskIncrementalNet, MultiHeadNet)) for m in model.modules()):
            raise TaskIncrementalRequired(f"model {type(model).__name__}")
        super().__init__(model=model, optimizer=optimizer,
                         criterion=nn.CrossEntropyLoss() if criterion is None else criterion,
                         plugins=plugins, **kwargs)
        self.speed.check_model(self.model)
        self.active_tasks: list[int] = []
        self.permanent_tasks: list[int] = []

