"""Amnesiac update deletion (Graves, Nagisetty and Ganesh, "Amnesiac Machine Learning", AAAI
2021) as continual-unlearning baselines, as CLArena (``clarena`` 1.1.0,
pengxiang-wang/continual-learning-arena: ``cl_algorithms/base.py`` ``AmnesiacCLAlgorithm``,
``cul_algorithms/base.py`` ``AmnesiacCULAlgorithm.delete_update``, ``cul_algorithms/*_unlearn.py``)
builds them over Finetuning, EWC, LwF, DER and DER++.

Every learning request t stores its parameter change, the model's state after learning t minus
its state before (with t's head already in the model):

    Δθ_t = θ(after learning t) − θ(before learning t),

and unlearning t subtracts it, θ ← θ − Δθ_t, then deletes it, together with the learner's own
state of t (EWC's Fisher and snapshot, LwF's distillation target, DER's and DER++'s buffer
B^t). The later tasks' updates were computed from a model that held Δθ_t, so nothing they
learned is undone: the unlearning is inexact, and it is not the oracle retrained without t
(only unlearning the last learned task gives back the parameters before it, up to rounding).

Each class learns exactly as its base learner (the same numbers, request by request until the
first unlearning): :class:`AmnesiacSequential` (Sequential), :class:`AmnesiacEWC` (EWC),
:class:`AmnesiacLwF` (LwF), :class:`AmnesiacDER` (DER, Buzzega et al. 2020: CE on the
current data plus β·MSE on stored logits, no CE on buffer samples) and :class:`AmnesiacDERpp`
(DER++); only the unlearning step is replaced (DER++'s replay fine-tuning does not run).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from avalanche.core import BasePlugin
from torch import nn

from pall_avalanche.catalog.declaration import Method
from pall_avalanche.rehearsal import ReplayObjective
from pall_avalanche.strategies.base import UnlearningPlugin, UnlearningTemplate
from pall_avalanche.strategies.ewc import EWC
from pall_avalanche.strategies.lwf import LwF
from pall_avalanche.strategies.replay import DERpp, LearningReplayPlugin, ReplayTemplate
from pall_avalanche.strategies.sequential import Sequential
from pall_avalanche.strategies.shared_keys import (
    BETA,
    BUFFER_SIZE,
    EWC_LAMBDA,
    LWF_ALPHA,
    LWF_TEMPERATURE,
    positive,
)

__all__ = ["DECLARATIONS", "AmnesiacDER", "AmnesiacDERpp", "AmnesiacEWC", "AmnesiacLwF",
           "AmnesiacPlugin", "AmnesiacSequential", "AmnesiacUnlearning"]


def learned_state(model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """The floating-point state of ``model`` a learning request changes, by name: every
    parameter and every floating-point buffer (BatchNorm's running statistics), each once
    (a shared tensor under its first name). Integer and boolean buffers (BatchNorm's batch
    counter, Avalanche's active-unit masks, the heads' class ids) are bookkeeping, not
    updates."""
    for name, tensor in (*model.named_parameters(), *model.named_buffers()):
        if tensor.is_floating_point():
            yield name, tensor


class AmnesiacPlugin(UnlearningPlugin):
    """Records the update Δθ_t of every learning request and deletes it on request.

    ``before_training_exp`` (after the model's adaptation, so t's new head is in it) copies the
    model's :func:`learned_state`; ``after_training_exp`` (after the plugins listed before this
    one, which may still change it: EWC's Fisher pass in training mode moves BatchNorm's
    statistics) stores Δθ_t = now − then in :attr:`updates`, in the tensors' dtype, on their
    device, as CLArena does; a task learned permanently (CLPU) stores none, since it is never
    unlearned. The strategy calls :meth:`delete_update` from its ``_unlearn`` (between
    ``before_unlearning`` and ``after_unlearning``, so observers of those events see the model
    before and after) and :meth:`forget` when t becomes permanent.

    The stored updates take one model's floating-point state per active task; they are not
    needed for inference (the inference size stays the model's, d).
    """

    checkpoint_attributes = ("updates",)

    def __init__(self) -> None:
        super().__init__()
        #: task → (name → Δθ_t of that tensor), in learning order.
        self.updates: dict[int, dict[str, torch.Tensor]] = {}
        self._start: dict[str, torch.Tensor] | None = None

    @torch.no_grad()
    def before_training_exp(self, strategy: UnlearningTemplate, **kwargs) -> None:
        self._start = None if strategy.learning_permanently else {
            name: t.detach().clone() for name, t in learned_state(strategy.model)}

    @torch.no_grad()
    def after_training_exp(self, strategy: UnlearningTemplate, **kwargs) -> None:
        if self._start is None:     # learned permanently: never deleted, nothing to store
            return
        now = dict(learned_state(strategy.model))
        self.updates[strategy.experience.task_label] = {
            name: now[name] - start for name, start in self._start.items()}
        self._start = None

    @torch.no_grad()
    def delete_update(self, model: nn.Module, task: int) -> None:
        """θ ← θ − Δθ_t in place on ``model``'s tensors, then delete Δθ_t.

        :param model: the strategy's model (the one the update was recorded on).
        :param task: a task whose update is stored.
        :raises KeyError: no update of ``task`` is stored (it is not learned, or permanent).
        """
        if task not in self.updates:
            raise KeyError(f"no stored update of task {task} (stored: {sorted(self.updates)}); "
                           "it is not learned, or it became permanent")
        state = dict(learned_state(model))
        for name, delta in self.updates.pop(task).items():
            state[name].sub_(delta)

    def forget(self, task: int) -> None:
        """Delete Δθ_t without applying it (t became permanent: it is never unlearned)."""
        del self.updates[task]


class AmnesiacUnlearning:
    """The Amnesiac unlearning of a learner, a mixin put before the learner's class in the
    bases (``class AmnesiacEWC(AmnesiacUnlearning, EWC)``). It adds an :class:`AmnesiacPlugin`
    after the learner's own plugins (before the caller's) and replaces the learner's unlearning
    step by the deletion of Δθ_t; a subclass deletes the learner's own state of t that its
    plugins do not delete themselves (:meth:`_unlearn`). Inference size: d, the model's (the
    stored updates are not inference parameters).

    It derives from no template: Avalanche wraps the ``__init__`` of every template subclass
    in a check of the keywords that class's own bases accept, so a template mixin could not
    pass the learner's keywords (``ewc_lambda``, ...) on.

    Takes every keyword argument of the learner.
    """

    permanence = ("the task's stored update Δθ_t is freed (a task learned permanently stores "
                  "none); the learner keeps its own state of the task (EWC's Fisher, LwF's "
                  "target, DER's buffer)")

    def __init__(self, *, plugins: Sequence[BasePlugin] | None = None, **kwargs) -> None:
        #: the recorded updates (:class:`AmnesiacPlugin`)
        self.amnesiac = AmnesiacPlugin()
        super().__init__(plugins=[self.amnesiac, *(plugins or [])], **kwargs)

    def _unlearn(self, task: int) -> None:
        """θ ← θ − Δθ_t (after every plugin's ``before_unlearning``); the learner's own
        unlearning step does not run."""
        self.amnesiac.delete_update(self.model, task)

    def _make_permanent(self, task: int) -> None:
        """Free Δθ_t: a permanent task is never unlearned."""
        self.amnesiac.forget(task)


class AmnesiacSequential(AmnesiacUnlearning, Sequential):
    """Fine-tuning (CLArena's ``AmnesiacFinetuning``) unlearned by deleting Δθ_t; nothing
    else is kept per task."""


class AmnesiacEWC(AmnesiacUnlearning, EWC):
    """EWC unlearned by deleting Δθ_t and t's Fisher and parameter snapshot (the latter by
    :class:`~pall_avalanche.strategies.ewc.TaskEWCPlugin` in ``before_unlearning``). The
    snapshots of the other tasks keep Δθ_t where they hold it, as CLArena's default
    (``if_unlearn_previous_network=False``). Takes the arguments of
    :class:`~pall_avalanche.strategies.ewc.EWC` (``ewc_lambda``).
    """


class AmnesiacLwF(AmnesiacUnlearning, LwF):
    """LwF unlearned by deleting Δθ_t and t's distillation target (the latter by
    :class:`~pall_avalanche.strategies.lwf.TaskLwFPlugin` in ``before_unlearning``). The
    teacher becomes a copy of the model after the deletion: LwF distils the network as it
    stands when the next task starts (Li and Hoiem 2017), and a teacher holding Δθ_t would
    carry t back into the remaining tasks (CLArena keeps one snapshot per task and deletes t's).
    Takes the arguments of :class:`~pall_avalanche.strategies.lwf.LwF` (``lwf_alpha``,
    ``lwf_temperature``).
    """

    def _unlearn(self, task: int) -> None:
        super()._unlearn(task)
        self.lwf.lwf.set_previous_model(self.model)


class AmnesiacDER(AmnesiacUnlearning, ReplayTemplate):
    """DER (Buzzega et al., 2020) unlearned by deleting Δθ_t and B^t (CLArena's
    ``AmnesiacDERUnlearn``). Learning adds β·MSE(f(x'), z') on stored logits of the active
    tasks' buffers to every learning minibatch, with no CE term on buffer samples (the DER
    paper's α is β here, as in :class:`~pall_avalanche.strategies.replay.DERpp`); the buffer
    is DER++'s (class-balanced B^t per task, logits z from the model just trained).

    Takes the arguments of :class:`~pall_avalanche.strategies.replay.ReplayTemplate` except
    ``n_retrain_iters`` and ``replay``.

    :param beta: weight of the logit (MSE) term, > 0.
    :raises ValueError: ``beta`` is not > 0.
    """

    def __init__(self, *, beta: float = 0.5, **kwargs) -> None:
        if not beta > 0:
            raise ValueError(f"beta={beta} is invalid for DER; it must be > 0 (its only "
                             "replay term is beta * MSE on stored logits)")
        self._der_beta = beta
        super().__init__(beta=beta, n_retrain_iters=0, replay=False, **kwargs)

    def _method_plugins(self) -> list[UnlearningPlugin]:
        """DER's learning-time replay: β·MSE only (:class:`ReplayObjective` with
        ``ce_weight=0``), right after the buffer's plugin, where DER++'s replay is."""
        self.replay = ReplayObjective(self.memory, self._der_beta, ce_weight=0.0)
        return [LearningReplayPlugin(self.replay)]

    def _unlearn(self, task: int) -> None:
        super()._unlearn(task)
        self.memory.drop(task)


class AmnesiacDERpp(AmnesiacUnlearning, DERpp):
    """DER++ (:class:`~pall_avalanche.strategies.replay.DERpp`: β·MSE + 1.0·CE on buffer
    samples) unlearned by deleting Δθ_t and B^t (CLArena's ``AmnesiacDERppUnlearn``), without
    DER++'s replay fine-tuning.

    Takes the arguments of :class:`~pall_avalanche.strategies.replay.DERpp` (``beta``, the
    weight of the logit (MSE) term, ...) except ``n_retrain_iters``.
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(n_retrain_iters=0, **kwargs)

    def _unlearn(self, task: int) -> None:
        super()._unlearn(task)
        self.memory.drop(task)


DECLARATIONS = (
    Method("amnesiac_sequential", AmnesiacSequential, exact=False, label="Amnesiac Sequential"),
    Method("amnesiac_ewc", AmnesiacEWC, exact=False, label="Amnesiac EWC",
           keys={"ewc_lambda": EWC_LAMBDA}),
    Method("amnesiac_lwf", AmnesiacLwF, exact=False, label="Amnesiac LwF",
           keys={"lwf_alpha": LWF_ALPHA, "lwf_temperature": LWF_TEMPERATURE}),
    # DER's only replay term is β times the logit MSE: β > 0
    Method("amnesiac_der", AmnesiacDER, exact=False, label="Amnesiac DER",
           keys={"buffer_size": BUFFER_SIZE, "beta": positive(BETA)}),
    Method("amnesiac_derpp", AmnesiacDERpp, exact=False, label="Amnesiac DER++",
           keys={"buffer_size": BUFFER_SIZE, "beta": BETA}),
)
