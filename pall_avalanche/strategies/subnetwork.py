"""The common base of the strategies that give every task a subnetwork of one network.

PALL, WSN, PackNet and the two sparse ablations all wrap the model in a
:class:`~pall_avalanche.masks.SubnetworkNet` (task t runs with ``w ⊙ m_t``), freeze entries with
a :class:`MaskFreezingPlugin` while a task trains, give every task its
own token parameters where the backbone has them (ViT's CLS token and positional embedding,
docs/fidelity.md, "Models"), keep one set of normalisation statistics per task (BatchNorm's
running statistics: fresh when the task's learning request starts, frozen after it, deleted on
unlearning; :class:`~pall_avalanche.masks.SubnetworkNet`) and count one bit per maskable entry
and the statistics' floats per stored mask in the model size. They differ only in how a task's
mask is chosen (:meth:`SubnetworkStrategy.start_task`), which entries it may train
(:meth:`SubnetworkStrategy.frozen_entries`) and how it is unlearned.

The plugins they compose live here too: :class:`MaskFreezingPlugin` keeps the active tasks'
entries bit-identical while a task trains, :class:`WeightResettingPlugin` stores the learned
task's mask and re-draws (:func:`redraw_`) what must not keep information of its data.

The model is a :class:`~pall_avalanche.models.TaskIncrementalNet` or an Avalanche
``MultiTaskModule`` with a ``MultiHeadClassifier`` (wrapped in a
:class:`~pall_avalanche.models.multitask.MultiHeadNet`, given ``n_tasks``), whose per-task
heads are task parameters: trained by their task only, frozen after it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from pall_avalanche.catalog import SUBNETWORK_SIZE
from pall_avalanche.core import UnlearningPlugin
from pall_avalanche.masks import (
    MaskSet,
    SubnetworkNet,
    draw_initial,
    mask_gradients_,
    threshold_method,
)
from pall_avalanche.models import count_parameters
from pall_avalanche.models.multitask import task_network
from pall_avalanche.strategies.base import UnlearningTemplate

__all__ = ["MaskFreezingPlugin", "SubnetworkStrategy", "WeightResettingPlugin",
           "as_subnetwork_net", "redraw_", "require_n_tasks"]


def as_subnetwork_net(model: nn.Module, alpha: float = 1.0, n_tasks: int | None = None
                      ) -> SubnetworkNet:
    """``model`` itself if it is a :class:`SubnetworkNet`, else its task-incremental network
    (:func:`~pall_avalanche.models.multitask.task_network`) wrapped in one.

    :param model: a :class:`~pall_avalanche.models.TaskIncrementalNet`, an Avalanche
        ``MultiTaskModule`` with a ``MultiHeadClassifier``, or a SubnetworkNet.
    :param alpha: connectivity of score-selected masks (unused by methods without scores).
    :param n_tasks: the number of tasks T (needed for an Avalanche model).
    """
    if not isinstance(model, SubnetworkNet):
        return SubnetworkNet(task_network(model, n_tasks), alpha)
    if model.alpha != alpha:
        raise ValueError(f"the SubnetworkNet given has alpha={model.alpha}, the strategy "
                         f"alpha={alpha}; pass the same value, or the unwrapped network")
    return model


def require_n_tasks(net: SubnetworkNet, method: str) -> int:
    """T of ``net``'s task-incremental network.

    :raises ValueError: it has none (an Avalanche model whose heads grow as tasks arrive):
        ``method`` splits each layer over T a priori and needs it.
    """
    n_tasks = net.net.n_tasks
    if n_tasks is None:
        raise ValueError(f"{method} splits every layer over the T tasks a priori, and the "
                         "model's heads grow as tasks arrive (no T): pass n_tasks=T to the "
                         "strategy")
    return n_tasks


@torch.no_grad()
def redraw_(net: SubnetworkNet, entries: MaskSet) -> None:
    """Re-draw the given entries of the maskable parameters from the initialisation
    distribution; every other entry stays bit-identical."""
    for name, mask in entries.bools(net.device).items():
        if mask.any():
            weight = net.weight(name)
            weight.copy_(torch.where(mask, draw_initial(net.maskable[name], name), weight))


class MaskFreezingPlugin(UnlearningPlugin):
    """Freezes the entries of the active tasks' masks during a learning request.

    After every backward pass: ``grad ← (grad + weight_decay · w) ⊙ (1 − M)`` on the maskable
    parameters, so frozen entries get an exactly-zero gradient and the request's fresh
    SGD/Adam (built with no weight decay of its own) leaves them bit-identical.

    :param weight_decay: the weight decay applied to free entries only (never to scores).
    :param frozen: ``strategy → MaskSet`` of the entries to freeze for the request (default:
        M, the OR of the active tasks' masks); :meth:`set_frozen` changes it mid-request.
    """

    def __init__(self, weight_decay: float = 0.0,
                 frozen: Callable[[UnlearningTemplate], MaskSet] | None = None) -> None:
        super().__init__()
        self.weight_decay = weight_decay
        self.frozen = frozen
        self._params: list[torch.Tensor] = []
        self._trainable: list[torch.Tensor] = []

    def before_training_exp(self, strategy: UnlearningTemplate, **kwargs) -> None:
        net: SubnetworkNet = strategy.model
        self.set_frozen(net, net.cumulative_mask(strategy.active_tasks) if self.frozen is None
                        else self.frozen(strategy))

    def set_frozen(self, net: SubnetworkNet, frozen: MaskSet) -> None:
        """Freeze exactly ``frozen`` from the next backward pass on."""
        device = net.device
        self._params = [w for _, w in net.named_weights()]
        self._trainable = [(~m).float() for m in frozen.bools(device).values()]

    def after_backward(self, strategy: UnlearningTemplate, **kwargs) -> None:
        mask_gradients_(self._params, self._trainable, self.weight_decay)

    def after_training_exp(self, strategy: UnlearningTemplate, **kwargs) -> None:
        self._params, self._trainable = [], []


class WeightResettingPlugin(UnlearningPlugin):
    """Stores the learned task's final mask (top-k of its final scores) and discards the scores;
    with ``redraw_unused`` it then re-draws every entry outside the cumulative mask M (entries
    trained on D^t that ended outside m_t, and unused head rows), so no information of D^t
    stays outside m_t.

    :param redraw_unused: re-draw the entries outside M after learning (PALL: yes; WSN: no).
    """

    def __init__(self, redraw_unused: bool = True) -> None:
        super().__init__()
        self.redraw_unused = redraw_unused

    def after_training_exp(self, strategy: UnlearningTemplate, **kwargs) -> None:
        net: SubnetworkNet = strategy.model
        task = strategy.experience.task_label
        net.set_mask(task, MaskSet.from_bool(net.current_mask()))
        net.stop_learning()
        if self.redraw_unused:
            redraw_(net, net.cumulative_mask(strategy.kept_tasks()).complement())


def _check_every_parameter_is_trained(net: SubnetworkNet) -> None:
    """A subnetwork method trains maskable weights and per-task parameters only; any other
    trainable parameter (an affine norm layer, tokens shared by all tasks) would silently stay
    at its initial value."""
    own = {id(p) for t in net.net.known_tasks() for p in net.net.task_parameters(t)}
    own |= {id(w) for _, w in net.named_weights()}
    stray = [name for name, p in net.net.named_parameters() if p.requires_grad
             and id(p) not in own]
    if stray:
        raise ValueError(
            f"parameters {stray[:5]}{' ...' if len(stray) > 5 else ''} are neither Conv2d/Linear "
            "weights nor per-task parameters, so a subnetwork method would never train them: "
            "use norm layers without affine parameters, per-task tokens "
            "(build_model(..., per_task_tokens=True)), or freeze them (requires_grad=False)")


class SubnetworkStrategy(UnlearningTemplate):
    """A strategy learning one subnetwork mask per task inside one shared network.

    Per learning request of task t: :meth:`start_task` prepares t's mask (by default fresh
    scores, selected per layer at connectivity ``alpha``); a fresh optimizer trains the
    maskable weights (weight decay only on entries left free by :meth:`frozen_entries`, via
    the freezing plugin), the scores if any, and t's own token parameters. Unlearning deletes
    t's mask and changes no parameter (WSN, PackNet); exact methods override ``_unlearn``.

    :param model: a :class:`~pall_avalanche.models.TaskIncrementalNet` (any backbone of
        Conv2d/Linear layers), an Avalanche ``MultiTaskModule`` with a ``MultiHeadClassifier``
        (with ``n_tasks``) or an already wrapped :class:`~pall_avalanche.masks.SubnetworkNet`.
    :param optimizer: its class and hyper-parameters are used for every request (SGD or Adam).
    :param alpha: per-layer connectivity of score-selected masks (default 1: no scores).
    :param mask_threshold: how the per-layer thresholds of the masks are found, one of
        :data:`~pall_avalanche.masks.THRESHOLD_METHODS` (a speed option: the masks are the
        same bit for bit); ``None`` keeps the network's (``auto`` unless set on it).
    :param plugins: further plugins; they run after the method's own (freezing first).
    """

    table_size = SUBNETWORK_SIZE

    per_task_tokens = True
    #: Whether a learning request optimises fresh scores (:meth:`SubnetworkNet.start_learning`).
    learns_scores: bool = True

    def __init__(self, *, model: nn.Module, optimizer: torch.optim.Optimizer,
                 alpha: float = 1.0, mask_threshold: str | None = None, plugins=None,
                 **kwargs) -> None:
        self.freezing = MaskFreezingPlugin(float(optimizer.defaults.get("weight_decay", 0.0)),
                                           frozen=lambda strategy: strategy.frozen_entries())
        net = as_subnetwork_net(model, alpha, kwargs.get("n_tasks"))
        if mask_threshold is not None:
            net.threshold = mask_threshold
        threshold_method(net.threshold, torch.device(kwargs.get("device") or "cpu"))
        _check_every_parameter_is_trained(net)
        super().__init__(model=net, optimizer=optimizer,
                         plugins=[self.freezing, *(plugins or [])], **kwargs)

    # ------------------------------------------------------------------ learning
    def model_adaptation(self, model=None):
        model = super().model_adaptation(model)
        if self.is_training:
            self.model.start_statistics(self.experience.task_label)
            self.start_task(self.experience.task_label)
        return model

    def _after_training_exp(self, **kwargs) -> None:
        self.model.stop_statistics()
        super()._after_training_exp(**kwargs)

    def start_task(self, task: int) -> None:
        """Prepare the model for learning ``task`` (default: fresh scores)."""
        if self.learns_scores:
            self.model.start_learning(task)

    def kept_tasks(self) -> list[int]:
        """The tasks whose stored subnetworks stay as they are (default: the active tasks;
        an audit-only leaky variant keeps an unlearned one)."""
        return list(self.active_tasks)

    def frozen_entries(self) -> MaskSet:
        """The entries the learning request must leave bit-identical (default: M, the OR of
        the kept tasks' masks, :meth:`kept_tasks`)."""
        return self.model.cumulative_mask(self.kept_tasks())

    def optimizer_param_groups(self) -> list[dict]:
        """One group of the maskable weights, the scores (if any) and the task's own token
        parameters, without the optimizer's weight decay: the freezing plugin decays the free
        weights, :meth:`_after_backward` the task's tokens, and scores are never decayed."""
        net: SubnetworkNet = self.model
        params = [w for _, w in net.named_weights()]
        if net.scores is not None:
            params += list(net.scores)
        params += net.net.task_parameters(self.experience.task_label)
        return [{"params": params, "weight_decay": 0.0}]

    def _after_backward(self, **kwargs) -> None:
        """Weight decay of the learning task's own token parameters, on their gradients (as
        the optimizer's would: g + weight_decay · w)."""
        if self.weight_decay:
            for p in self.model.net.task_parameters(self.experience.task_label):
                if p.grad is not None:
                    p.grad.add_(p, alpha=self.weight_decay)
        super()._after_backward(**kwargs)

    # ---------------------------------------------------------------- unlearning
    def redraw_set(self, task: int) -> MaskSet | None:
        """The entries unlearning ``task`` promises to re-draw (an audit checks the promise);
        ``None`` (the default): the method promises none."""
        return None

    def _unlearn(self, task: int) -> None:
        """Delete the task's mask; every parameter stays as it is (inexact)."""
        self.model.remove_mask(task)

    # --------------------------------------------------------------- model size
    def inference_size(self, n_tasks: int | None = None) -> tuple[int, int]:
        """(float parameters of the network and the normalisation statistics of every stored
        task, 1 bit per maskable entry per stored mask).

        :param n_tasks: the size with that many stored masks (default: the stored ones now).
        """
        net: SubnetworkNet = self.model
        masks = len(net.masks) if n_tasks is None else n_tasks
        return (count_parameters(net.net) + net.statistics_floats() * masks,
                MaskSet.empty(net.shapes).n_entries() * masks)
