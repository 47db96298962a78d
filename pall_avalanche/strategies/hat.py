"""HAT, hard attention to the task (Serrà, Surís, Miron and Karatzoglou, "Overcoming
catastrophic forgetting with hard attention to the task", ICML 2018; reference code
joansj/hat, ``src/approaches/hat.py`` and ``src/networks/mlp_hat.py``), and AmnesiacHAT,
its unlearning by update deletion with compensation from backup networks (CLArena,
pengxiang-wang/continual-learning-arena, unpublished: ``cl_algorithms/hat.py``,
``cl_algorithms/amnesiac_hat.py``, ``cl_algorithms/base.py`` ``AmnesiacCLAlgorithm``,
``backbones/base.py`` ``HATMaskBackbone`` and ``AmnesiacHATBackbone``,
``backbones/amnesiac_hat_mlp.py``, ``cul_algorithms/amnesiac_hat_unlearn.py``).

**Gates** (:class:`~pall_avalanche.masks.attention.HATNet`). Every ``Linear``/``Conv2d``
layer l of the backbone has one gate per unit (output feature or channel), a_l^t = σ(s ·
e_l^t), from the task embedding e^t (drawn from N(0, 1) when t's learning request starts).
The gate scales the layer's output; the backbone must be a chain of such layers
(:data:`~pall_avalanche.masks.attention.CHAIN_MODULES` between them), so this equals the
reference's gating after ReLU, dropout and max-pooling (they commute with a non-negative
per-unit scale). The per-task heads are not gated. While t trains, s is annealed over the B
batches of every epoch, s_b = 1/s_max + (s_max − 1/s_max)(b − 1)/(B − 1) (the paper's Eq. 3;
:func:`~pall_avalanche.masks.attention.annealed_scale`). Afterwards t's gates are its binary
mask 1[σ(s_max·e^t) > ½] = 1[e^t > 0] (CLArena's ``te_to_binary_mask``): t's inference runs
with them, and a sample of a task without an embedding (never learned, or unlearned) runs the
ungated network. Every sample goes through its own task's gates, also in a mixed-task
mini-batch. **Training** (:class:`HAT`), per mini-batch of task t, with a^{<t} the union
(max) of the active tasks' binary masks:

- loss = CE + c · Σ_i a_i^t (1 − a_i^{<t}) / Σ_i (1 − a_i^{<t}) over the units of all layers
  (:func:`~pall_avalanche.masks.attention.attention_regulariser`, Eq. 5; c = ``lamb``, 0.75);
- weight gradients × (1 − min(a^{<t}_out, a^{<t}_in)) (Eq. 2; the first layer by its output
  units, biases by theirs, a ``Linear`` after a flattened ``Conv2d`` by the channel of each
  input feature); only t's head trains;
- weight decay moves nothing frozen: the request's optimizer has ``weight_decay=0`` and the
  constructor's decay is added to the gradient of the trainable entries only,
  g ← (g + wd · w) ⊙ trainable, so with momentum buffers fresh per request (the template's)
  every frozen entry keeps a zero gradient and stays bit-identical, with SGD or Adam;
- the embedding's gradient is compensated, g ← g · s_max/s · (cosh(clamp(s e, ±50)) + 1) /
  (cosh(e) + 1) (Sec. 2.5, ``thres_cosh``; no weight decay on it), every gradient clipped to
  norm 10000 (the reference's ``clipgrad``), and after each step e is clamped to ±6
  (``thres_emb``).

The reference's validation-based learning-rate patience and best-model restoring are not
kept: the configuration's learning-rate schedule and optimizer apply, as to every method.
**Unlearning.** HAT has none; :class:`HAT` (inexact) deletes t's embedding, which releases
its units from a^{<t} (later tasks may train them), and re-draws t's head (its classes
forgotten); what t's data wrote into the shared weights stays. :class:`AmnesiacHAT` keeps
CLArena's machinery: per learning request of t, Δθ_t (the network's change) and, for every
earlier unlearnable task u, a backup network trained alongside t; unlearning u subtracts Δθ_u
and compensates each later task from its backup (see the class).
"""

from __future__ import annotations

import torch
from torch import nn

from pall_avalanche.catalog import EMBEDDING_SIZE
from pall_avalanche.catalog.declaration import Key, Method
from pall_avalanche.masks import mask_gradients_
from pall_avalanche.masks.attention import (
    HATNet,
    Route,
    annealed_scale,
    attention_regulariser,
    reset_output_,
)
from pall_avalanche.models import count_parameters
from pall_avalanche.models.grouped import group_losses
from pall_avalanche.models.multitask import task_network
from pall_avalanche.strategies.base import UnlearningTemplate

__all__ = ["COMPENSATE_ORDERS", "HAT", "HAT_KEYS", "DECLARATIONS", "AmnesiacHAT"]

#: The order in which AmnesiacHAT compensates the tasks learned after the unlearned one
#: (CLArena's ``compensate_order``): oldest first, or newest first.
COMPENSATE_ORDERS = ("forward", "reverse")


def _check(name: str, value: float, valid: bool, what: str) -> None:
    if not valid:
        raise ValueError(f"{name}={value!r} is invalid; it must be {what}")


class HAT(UnlearningTemplate):
    """HAT (Serrà et al., 2018) on a chain backbone (module docstring); unlearning deletes
    the task's embedding, releasing its units, and re-draws its head (inexact).

    Takes every keyword argument of :class:`UnlearningTemplate`, plus:

    :param model: a :class:`~pall_avalanche.models.TaskIncrementalNet`, an Avalanche
        ``MultiTaskModule`` with a ``MultiHeadClassifier`` (``MTSimpleMLP``) or a
        :class:`~pall_avalanche.masks.attention.HATNet`, whose shared modules are a chain of
        Linear/Conv2d layers (a ResNet or a ViT is refused in one line).
    :param s_max: the largest gate scale, s at test time (≥ 1; 400).
    :param lamb: c, the weight of the attention regulariser (≥ 0; 0.75).
    :param thres_cosh: the clamp of s·e in the embedding's gradient compensation (> 0; 50).
    :param thres_emb: the clamp of the embedding after every step (> 0; 6).
    :param clipgrad: the gradient norm clipped to (> 0; the reference's 10000).
    """

    table_size = EMBEDDING_SIZE
    permanence = ("nothing is freed: a permanent task keeps its embedding (its gates) and its "
                  "head, as every learned task does; it is only never unlearned")

    def __init__(self, *, model: nn.Module, optimizer: torch.optim.Optimizer,
                 s_max: float = 400.0, lamb: float = 0.75, thres_cosh: float = 50.0,
                 thres_emb: float = 6.0, clipgrad: float = 10000.0, **kwargs) -> None:
        _check("s_max", s_max, s_max >= 1, ">= 1 (s anneals from 1/s_max up to s_max)")
        _check("lamb", lamb, lamb >= 0, ">= 0")
        for name, value in (("thres_cosh", thres_cosh), ("thres_emb", thres_emb),
                            ("clipgrad", clipgrad)):
            _check(name, value, value > 0, "> 0")
        net = model if isinstance(model, HATNet) else HATNet(
            task_network(model, kwargs.get("n_tasks")))
        super().__init__(model=net, optimizer=optimizer, **kwargs)
        self.s_max, self.lamb = float(s_max), float(lamb)
        self.thres_cosh, self.thres_emb, self.clipgrad = (float(thres_cosh), float(thres_emb),
                                                          float(clipgrad))
        # the learning request's: the trained parameters by name, those with frozen entries
        # paired with their 0/1 trainable entries, the tensors trained whole, the embedding,
        # a^{<t} and the batches of the epoch
        self._trained: dict[str, nn.Parameter] = {}
        self._masked: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._whole: list[torch.Tensor] = []
        #: Tensors a request trains besides the network (AmnesiacHAT's backups): decayed,
        #: never clipped, never counted in the clipped norm.
        self._backups: list[torch.Tensor] = []
        self._embedding: nn.Parameter | None = None
        self._taken: torch.Tensor | None = None
        self._batches = 1

    # ------------------------------------------------------------------ learning
    def model_adaptation(self, model=None):
        model = super().model_adaptation(model)
        if self.is_training:
            self.start_task(self.experience.task_label)
        return model

    def start_task(self, task: int) -> None:
        """Prepare the learning request of ``task``: a^{<t} of the active tasks, the trainable
        entries (gated weights and biases outside a^{<t}'s entries, ``task``'s head) and a
        fresh embedding."""
        net: HATNet = self.model
        taken = net.cumulative_mask(self.active_tasks)
        params = dict(net.net.named_parameters())
        trainable = {name: ~frozen for name, frozen in net.entry_masks(taken).items()}
        trainable.update(net.net.head_entries(task))
        self._trained, self._masked, self._whole, self._backups = {}, [], [], []
        for name, entries in trainable.items():
            param = self._trained[name] = params[name]
            if bool(entries.all()):
                self._whole.append(param)
            else:
                self._masked.append((param, entries.to(param.dtype)))
        self._embedding = net.start_learning(task)
        self._taken = taken.to(self._embedding.dtype)

    def request_tensors(self) -> list[torch.Tensor]:
        """What the learning request in progress trains: the network's parameters (their
        trainable entries), the tensors trained whole and the task's embedding."""
        return [*(param for param, _ in self._masked), *self._whole, self._embedding]

    def optimizer_param_groups(self) -> list[dict]:
        """One group of :meth:`request_tensors` and the backups, without the optimizer's
        weight decay (:meth:`optimizer_step` decays the trainable entries)."""
        return [{"params": [*self.request_tensors(), *self._backups], "weight_decay": 0.0}]

    def _before_training_epoch(self, **kwargs) -> None:
        self._batches = len(self.dataloader)
        super()._before_training_epoch(**kwargs)

    def _before_training_iteration(self, **kwargs) -> None:
        self.model.scale = annealed_scale(self.clock.train_epoch_iterations + 1, self._batches,
                                          self.s_max)
        super()._before_training_iteration(**kwargs)

    def criterion(self) -> torch.Tensor:
        """CE, plus c times the attention regulariser of the learning task's gates in
        training."""
        loss = super().criterion()
        if self.is_training and self._embedding is not None:
            gates = torch.sigmoid(self.model.scale * self._embedding)
            loss = loss + self.lamb * attention_regulariser(gates, self._taken)
        return loss

    def optimizer_step(self) -> None:
        """Weight decay on the trainable entries (and the backups) and none elsewhere, the
        embedding's gradient compensated, the gradients of :meth:`request_tensors` clipped to
        ``clipgrad`` (the backups' neither clipped nor counted); the step; the embedding
        clamped to ±``thres_emb``."""
        mask_gradients_([p for p, _ in self._masked], [t for _, t in self._masked],
                        self.weight_decay)
        whole = [p for p in (*self._whole, *self._backups) if p.grad is not None]
        if self.weight_decay and whole:
            torch._foreach_add_([p.grad for p in whole], whole, alpha=self.weight_decay)
        embedding, s = self._embedding, self.model.scale
        if embedding.grad is not None:
            e = embedding.detach()
            embedding.grad.mul_((torch.cosh(torch.clamp(s * e, -self.thres_cosh,
                                                        self.thres_cosh)) + 1)
                                / (torch.cosh(e) + 1) * (self.s_max / s))
        torch.nn.utils.clip_grad_norm_(self.request_tensors(), self.clipgrad)
        super().optimizer_step()
        with torch.no_grad():
            embedding.clamp_(-self.thres_emb, self.thres_emb)

    def _after_training_exp(self, **kwargs) -> None:
        self.model.stop_learning()
        self._trained, self._masked, self._whole, self._backups = {}, [], [], []
        self._embedding = self._taken = None
        super()._after_training_exp(**kwargs)

    # ---------------------------------------------------------------- unlearning
    def _unlearn(self, task: int) -> None:
        """Delete the task's embedding (its units are released) and re-draw its head; the
        shared weights stay as they are (inexact)."""
        self.model.remove_embedding(task)
        reset_output_(self.model.net, task)

    # --------------------------------------------------------------- model size
    def inference_size(self, n_tasks: int | None = None) -> tuple[int, int]:
        """(the network's float parameters plus one embedding per stored task, no mask bits:
        d + E_i).

        :param n_tasks: the size with that many embeddings (default: the stored ones now).
        """
        net: HATNet = self.model
        stored = len(net.embeddings) if n_tasks is None else n_tasks
        return count_parameters(net.net) + stored * net.embedding_size, 0


class AmnesiacHAT(HAT):
    """AmnesiacHAT (CLArena; module docstring): HAT (its ``architecture="HAT"``, hard gradient
    clipping) with update deletion and compensation from backup networks, one task per
    unlearning request.

    - Learning t stores Δθ_t = θ(after) − θ(before) of what the request trains, the gated
      layers and t's head (CLArena's ``AmnesiacCLAlgorithm`` stores the whole backbone and
      heads; the rest has Δ = 0); a task learned permanently stores none. For every active
      temporary task u learned earlier, a backup of the gated layers is trained alongside
      t: initialised as θ_0 + Σ_{τ learned before u, Δθ_τ not deleted} Δθ_τ (CLArena's
      ``backup_init_mode="before"``, θ_0 the network before the first request; kept as a
      running sum, so a permanent task's Δθ_τ need not be), run as the network whose units
      of u's mask m_u are computed with the backup's weights
      (:meth:`~pall_avalanche.masks.attention.HATNet.backup_forward`) under t's gates and
      head; the loss adds the mean of their CE on t's samples. The backups are not
      gradient-clipped; weight decay applies to them whole. At the end their
      weights are stored as the backups (u, t).
    - Unlearning u: θ ← θ − Δθ_u; then, for every active task t learned after u (oldest
      first, ``compensate_order="forward"``, or newest first), the entries of m_t ∩ m_u
      (minimum of the two ends, :meth:`~pall_avalanche.masks.attention.HATNet.entry_masks`)
      take backup (u, t)'s values
      (CLArena's ``AmnesiacHATUnlearn.compensate_by_backup``); Δθ_u, u's backups and the
      backups trained for u are deleted, and so is u's embedding: its units are released at
      once and u runs ungated (CLArena keeps u's mask to test u with and drops it from the
      cumulative mask at the end of the next learning request).

    CLArena's defaults are not all kept: its ``architecture="AdaHAT"`` (soft gradient
    adjustment) gives way to HAT's hard clipping, and there is no DER++ replay while learning
    (``if_replay``) nor replay repairing after unlearning (``if_replay_repairing``), so no
    buffer. Inference size: HAT's (the stored updates and backups are not inference
    parameters).

    :param compensate_order: :data:`COMPENSATE_ORDERS`, the order of the compensated tasks.
    """

    checkpoint_attributes = ("updates", "before", "base", "backups")
    permanence = ("its stored update Δθ_t, its backup initialisation and its backups (t, ·) "
                  "are freed (no request can unlearn it any more); its embedding, head and "
                  "the backups trained for earlier tasks alongside it stay")

    def __init__(self, *, compensate_order: str = "forward", **kwargs) -> None:
        if compensate_order not in COMPENSATE_ORDERS:
            raise ValueError(f"compensate_order={compensate_order!r} is invalid; valid: "
                             f"{COMPENSATE_ORDERS}")
        super().__init__(**kwargs)
        self.compensate_order = compensate_order
        #: task → (name in the network → Δθ_t), the tasks that can still be unlearned.
        self.updates: dict[int, dict[str, torch.Tensor]] = {}
        #: task u → (gated name → θ_0 + Σ_{τ before u} Δθ_τ), u's backups' initialisation.
        self.before: dict[int, dict[str, torch.Tensor]] = {}
        #: gated name → θ_0 + Σ Δθ_τ over the learned tasks whose update was not deleted.
        self.base: dict[str, torch.Tensor] = {}
        #: u → t → (gated name → backup (u, t)), t learned after u, in learning order.
        self.backups: dict[int, dict[int, dict[str, torch.Tensor]]] = {}
        self._start: dict[str, torch.Tensor] = {}
        #: The tasks with a backup trained in the learning request in progress, in order;
        #: their backups' weights stacked over those tasks (gated name → (G, ...)), and the
        #: route of every gated layer (weight, bias, units; each stacked likewise).
        self._backup_tasks: list[int] = []
        self._backup_weights: dict[str, torch.Tensor] = {}
        self._routes: Route = []

    # ------------------------------------------------------------------ learning
    def start_task(self, task: int) -> None:
        """HAT's preparation, the network's state before learning ``task`` and one backup
        per task whose update is stored."""
        super().start_task(task)
        net: HATNet = self.model
        if not self.base:
            self.base = {name: p.detach().clone() for name, p in net.gated_parameters()}
        self._start = {name: p.detach().clone() for name, p in self._trained.items()}
        if not self.learning_permanently:
            self.before[task] = {name: value.clone() for name, value in self.base.items()}
        self._backup_tasks = list(self.updates)
        self._backup_weights, self._routes = {}, []
        if self._backup_tasks:
            weights = self._backup_weights = {
                name: torch.stack([self.before[other][name] for other in self._backup_tasks]
                                  ).requires_grad_(True) for name in self.base}
            units = torch.stack([net.unit_mask(other) for other in self._backup_tasks]
                                ).split(net.units, dim=1)
            self._routes = [(weights[f"{name}.weight"], weights.get(f"{name}.bias"),
                             units[index]) for index, name in enumerate(net.layer_names)]
            self._backups = list(weights.values())

    def _learning_samples(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The mini-batch's inputs and targets of the learning task."""
        tasks = self.mb_tasks()
        if isinstance(tasks, int):
            return self.mb_x, self.mb_y
        rows = tasks == self.experience.task_label
        return self.mb_x[rows], self.mb_y[rows]

    def criterion(self) -> torch.Tensor:
        """HAT's loss plus, in training, the mean CE of the backups on the learning task's
        samples (CLArena's ``backup_loss_cls_total``)."""
        loss = super().criterion()
        if self.is_training and self._routes:
            x, y = self._learning_samples()
            if len(x):
                with self.speed.autocast(self.device):
                    logits = self.model.backup_forwards(x, self.experience.task_label,
                                                        self._routes)
                losses = group_losses(self._criterion, logits.float(),
                                      y.expand(len(self._backup_tasks), -1))
                loss = loss + losses.mean()
        return loss

    def _after_training_exp(self, **kwargs) -> None:
        """Store Δθ_t (unless t is learned permanently: it is never unlearned, only the later
        backups' initialisation counts it) and the backups (u, t), before the plugins see the
        request end."""
        task = self.experience.task_label
        with torch.no_grad():
            delta = {name: self._trained[name].detach() - start
                     for name, start in self._start.items()}
            for name, value in self.base.items():
                value += delta[name]
        if not self.learning_permanently:
            self.updates[task] = delta
        for index, other in enumerate(self._backup_tasks):
            self.backups.setdefault(other, {})[task] = {
                name: w[index].detach().clone() for name, w in self._backup_weights.items()}
        self._start, self._backup_tasks, self._backup_weights, self._routes = {}, [], {}, []
        super()._after_training_exp(**kwargs)

    # ---------------------------------------------------------------- unlearning
    @torch.no_grad()
    def _unlearn(self, task: int) -> None:
        """θ ← θ − Δθ_u, then compensation of the later tasks from their backups (u, t);
        u's stored state and embedding are deleted."""
        net: HATNet = self.model
        params = dict(net.net.named_parameters())
        delta = self.updates.pop(task)
        for name, change in delta.items():
            params[name].sub_(change)
        later = self.backups.pop(task, {})
        order = list(later.items())
        if self.compensate_order == "reverse":
            order.reverse()
        units = net.unit_mask(task)
        entries = 0
        for other, backup in order:
            for name, mask in net.entry_masks(units & net.unit_mask(other)).items():
                params[name].copy_(torch.where(mask, backup[name], params[name]))
                entries += int(mask.sum())
        for name, value in self.base.items():
            value -= delta[name]
        for other in later:
            for name, value in self.before.get(other, {}).items():
                value -= delta[name]
        del self.before[task]
        for stored in self.backups.values():
            stored.pop(task, None)
        net.remove_embedding(task)
        self.record_statistics(compensated_tasks=list(later), compensated_entries=entries)

    def _make_permanent(self, task: int) -> None:
        """Free Δθ_t, t's backup initialisation and its backups: t is never unlearned."""
        del self.updates[task], self.before[task]
        self.backups.pop(task, None)


#: HAT's keys, at the values of the HAT paper and its reference code (``joansj/hat``).
HAT_KEYS = {"s_max": Key(400.0, "HAT's largest gate scale s (the scale at test time)", low=1),
            "lamb": Key(0.75, "c, the weight of HAT's attention regulariser", low=0)}
DECLARATIONS = (Method("hat", HAT, exact=False, label="HAT", keys=HAT_KEYS),
                Method("amnesiac_hat", AmnesiacHAT, exact=False, label="Amnesiac HAT", keys={
                    **HAT_KEYS, "compensate_order": Key(
                        "forward", "the order in which the remaining tasks' backups are "
                        "compensated", choices=COMPENSATE_ORDERS)}))
