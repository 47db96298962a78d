"""HAT, hard attention to the task (Serrà, Surís, Miron and Karatzoglou, "Overcoming
catastrophic forgetting with hard attention to the task", ICML 2018; reference code
joansj/hat, ``src/approaches/hat.py`` and ``src/networks/mlp_hat.py``), and AmnesiacHAT,
its unlearning by update deletion with compensation from backup networks (CLArena,
pengxiang-wang/continual-learning-arena, unpublished: ``cl_algorithms/hat.py``,
``cl_algorithms/amnesiac_hat.py``, ``cl_algorithms/base.py`` ``AmnesiacCLAlgorithm``,
``backbones/base.py`` ``HATMaskBackbone`` and ``AmnesiacHATBackbone``,
``backbones/amnesiac_hat_mlp.py``, ``cul_algorithms/amnesiac_hat_unlearn.py``).

**Gates** (:class:`HATNet`). Every ``Linear``/``Conv2d`` layer l of the backbone has one gate
per unit (output feature or channel), a_l^t = σ(s · e_l^t), from the task embedding e^t
(drawn from N(0, 1) when t's learning request starts). The gate scales the layer's output;
the backbone must be a chain of such layers (:data:`CHAIN_MODULES` between them), so this
equals the reference's gating after ReLU, dropout and max-pooling (they commute with a
non-negative per-unit scale). The per-task heads are not gated. While t trains, s is annealed
over the B batches of every epoch, s_b = 1/s_max + (s_max − 1/s_max)(b − 1)/(B − 1) (the
paper's Eq. 3; :func:`annealed_scale`). Afterwards t's gates are its binary mask
1[σ(s_max·e^t) > ½] = 1[e^t > 0] (CLArena's ``te_to_binary_mask``): t's inference runs with
them, and a sample of a task without an embedding (never learned, or unlearned) runs the
ungated network. Every sample goes through its own task's gates, also in a mixed-task
mini-batch.

**Training** (:class:`HAT`), per mini-batch of task t, with a^{<t} the union (max) of the
active tasks' binary masks:

- loss = CE + c · Σ_i a_i^t (1 − a_i^{<t}) / Σ_i (1 − a_i^{<t}) over the units of all layers
  (:func:`attention_regulariser`, Eq. 5; c = ``lamb``, 0.75);
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
kept: the harness's learning-rate schedules and optimizer (the configuration's) apply, as to
every method.

**Unlearning.** HAT has none; :class:`HAT` (inexact) deletes t's embedding, which releases
its units from a^{<t} (later tasks may train them), and re-draws t's head (its classes
forgotten); what t's data wrote into the shared weights stays. :class:`AmnesiacHAT` keeps
CLArena's machinery: per learning request of t, Δθ_t (the network's change) and, for every
earlier unlearnable task u, a backup network trained alongside t; unlearning u subtracts Δθ_u
and compensates each later task from its backup (see the class).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from avalanche.models import MultiTaskModule
from torch import nn
from torch.nn import functional as F

from pall_avalanche.catalog import EMBEDDING_SIZE
from pall_avalanche.masks import draw_initial, mask_gradients_
from pall_avalanche.models import TaskIncrementalNet, count_parameters
from pall_avalanche.models.multihead import forward_by_task
from pall_avalanche.models.multitask import MultiHeadNet, task_network
from pall_avalanche.strategies.base import UnlearningTemplate

__all__ = ["CHAIN_MODULES", "COMPENSATE_ORDERS", "AmnesiacHAT", "HAT", "HATNet",
           "annealed_scale", "attention_regulariser", "reset_output_"]

#: Modules without children a gated chain may hold between its ``Linear``/``Conv2d`` layers:
#: each commutes with a non-negative per-unit scale (relu(a·z) = a·relu(z) for a ≥ 0;
#: dropout, pooling and flattening act per unit or per channel; an empty ``Sequential``, as
#: Avalanche's ``as_multitask`` leaves in place of the classifier, is the identity), so gating
#: a layer's output is the reference's gating after them.
CHAIN_MODULES = (nn.ReLU, nn.LeakyReLU, nn.Dropout, nn.Dropout2d, nn.Flatten, nn.Identity,
                 nn.Sequential, nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d,
                 nn.AdaptiveMaxPool2d)
#: The order in which AmnesiacHAT compensates the tasks learned after the unlearned one
#: (CLArena's ``compensate_order``): oldest first, or newest first.
COMPENSATE_ORDERS = ("forward", "reverse")
#: Per gated layer (weight, bias or ``None``, bool units): which units a backup forward
#: computes with other weights (:meth:`HATNet.backup_forward`).
Route = Sequence[tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]]


def annealed_scale(batch: int, n_batches: int, s_max: float) -> float:
    """s of the ``batch``-th batch (1-based) of an epoch of ``n_batches``, the paper's Eq. 3:
    1/s_max + (s_max − 1/s_max)(b − 1)/(B − 1), from 1/s_max at the first batch to s_max at
    the last. An epoch of one batch trains at s_max (Eq. 3 needs B ≥ 2).

    :param batch: b, 1 ≤ b ≤ B.
    :param n_batches: B, the batches of the epoch.
    :param s_max: the largest scale (400 in the paper).
    """
    if n_batches < 2:
        return s_max
    return 1 / s_max + (s_max - 1 / s_max) * (batch - 1) / (n_batches - 1)


def attention_regulariser(gates: torch.Tensor, taken: torch.Tensor) -> torch.Tensor:
    """The paper's Eq. 5 (without c): Σ_i a_i (1 − a^{<t}_i) / Σ_i (1 − a^{<t}_i) over all
    units of all layers, the share of the units no earlier task holds that t's gates open
    (0 when every unit is taken).

    :param gates: a^t, the learning task's gates, flat over the layers.
    :param taken: a^{<t}, the cumulative mask of the earlier tasks, 0/1, the same shape.
    """
    free = 1 - taken
    return (gates * free).sum() / free.sum().clamp_min(1)


def _not_a_chain(net: TaskIncrementalNet | MultiHeadNet, what: str) -> ValueError:
    model = net.backbone if isinstance(net, TaskIncrementalNet) else net.model
    return ValueError(
        f"HAT gates the units of a chain of Linear/Conv2d layers (such as the digits 'mlp' and "
        f"'cnn' or Avalanche's MTSimpleMLP); model {type(model).__name__} is not one: {what}; "
        f"supported between the layers: {', '.join(m.__name__ for m in CHAIN_MODULES)}")


def _units(layer: nn.Linear | nn.Conv2d) -> int:
    """The units of a gated layer: its output features or channels."""
    return layer.out_channels if isinstance(layer, nn.Conv2d) else layer.out_features


def _gated_chain(net: TaskIncrementalNet | MultiHeadNet) -> list[tuple[str, int]]:
    """(name, inputs per unit of the previous layer) of every Linear/Conv2d layer of ``net``'s
    shared modules, in order (0 for the first layer, whose inputs are not gated; k > 1 for a
    ``Linear`` reading a flattened ``Conv2d`` output, k positions per channel).

    :raises ValueError: the shared modules are not a chain of such layers (one line).
    """
    layers: list[tuple[str, int]] = []
    previous: nn.Module | None = None
    for name, module in net.backbone_modules():
        own = [n for n, _ in module.named_parameters(recurse=False)]
        if type(module) in (nn.Linear, nn.Conv2d):
            conv = isinstance(module, nn.Conv2d)
            if conv and module.groups != 1:
                raise _not_a_chain(net, f"Conv2d '{name}' has groups={module.groups} (only 1)")
            width = module.in_channels if conv else module.in_features
            if previous is None:
                layers.append((name, 0))
            else:
                units = _units(previous)
                if (conv and isinstance(previous, nn.Linear)) or width % units \
                        or (type(module) is type(previous) and width != units):
                    raise _not_a_chain(
                        net, f"{type(module).__name__} '{name}' reads {width} inputs after "
                        f"{units} units of {type(previous).__name__} '{layers[-1][0]}'")
                layers.append((name, width // units))
            previous = module
        elif own:
            raise _not_a_chain(net, f"module '{name}' ({type(module).__name__}) holds "
                               f"parameters {own} outside a Linear/Conv2d layer")
        elif next(module.children(), None) is None and type(module) not in CHAIN_MODULES:
            raise _not_a_chain(net, f"module '{name}' is a {type(module).__name__}")
    if not layers:
        raise _not_a_chain(net, "it has no Linear/Conv2d layer outside its output layer")
    return layers


class _GateHook:
    """The forward hook of a gated layer: its output through :meth:`HATNet.gate_output`."""

    def __init__(self, net: HATNet, index: int) -> None:
        self.net = net
        self.index = index

    def __call__(self, module: nn.Module, inputs: tuple, output: torch.Tensor) -> torch.Tensor:
        return self.net.gate_output(self.index, module, inputs[0], output)


class HATNet(MultiTaskModule):
    """A task-incremental network under HAT's per-task unit gates (module docstring).

    The network is used as it is: each gated layer's output is scaled by a forward hook, and
    only inside :meth:`forward` (a direct call of the wrapped network runs it ungated). The
    task embeddings are parameters ``embeddings.<t>``, one flat vector per task over the units
    of all layers in order (:attr:`units` per layer); a state dict restores into a network
    built alike whatever embeddings it holds.

    :param net: a :class:`~pall_avalanche.models.TaskIncrementalNet` or an Avalanche
        ``MultiTaskModule`` with a ``MultiHeadClassifier``
        (:func:`~pall_avalanche.models.multitask.task_network`), whose shared modules are a
        chain of ``Linear``/``Conv2d`` (groups 1) layers with :data:`CHAIN_MODULES` between
        them (containers may be of any class; their forward is trusted to call the layers one
        after the other).
    :raises ValueError: the shared modules are not such a chain (one line).
    """

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = task_network(net)
        layers = _gated_chain(self.net)
        #: The gated layers' names in ``net``, in order.
        self.layer_names: list[str] = [name for name, _ in layers]
        #: The units (gates) of each gated layer.
        self.units: list[int] = []
        #: Inputs per unit of the previous layer, per layer (0 for the first).
        self.repeats: list[int] = [repeat for _, repeat in layers]
        for index, name in enumerate(self.layer_names):
            layer = self.net.get_submodule(name)
            self.units.append(_units(layer))
            layer.register_forward_hook(_GateHook(self, index))
        self.embeddings = nn.ParameterDict()
        #: The task being learned (soft gates in training mode), or ``None``.
        self.learning: int | None = None
        #: s, the scale of the learning task's gates.
        self.scale = 1.0
        self._gates: list[torch.Tensor | None] | None = None
        self._route: Route | None = None
        self._register_load_state_dict_pre_hook(self._embeddings_from_state)

    # ----------------------------------------------------------------- structure
    @property
    def embedding_size(self) -> int:
        """Floats of one task's embedding: the units of all gated layers."""
        return sum(self.units)

    def gated_layers(self) -> Iterator[tuple[str, nn.Module]]:
        """(name in ``net``, module) of every gated layer, in order."""
        for name in self.layer_names:
            yield name, self.net.get_submodule(name)

    def gated_parameters(self) -> Iterator[tuple[str, nn.Parameter]]:
        """(name in ``net``, parameter) of the gated layers' weights and biases, in order."""
        for name, layer in self.gated_layers():
            for attr, param in layer.named_parameters(recurse=False):
                yield f"{name}.{attr}", param

    def entry_masks(self, units: torch.Tensor) -> dict[str, torch.Tensor]:
        """The parameter entries of a unit mask, by the minimum of their two ends
        (CLArena's ``get_layer_measure_parameter_wise(aggregation_mode="min")``): weight
        entry (i, j) of layer l is in when unit i of l and input j's unit of l − 1 both are
        (the first layer: unit i alone), a bias entry when its unit is.

        :param units: bool, flat over the units of all layers.
        :return: name in ``net`` → bool mask, for every gated weight and bias.
        """
        per_layer = units.split(self.units)
        out = {}
        for index, (name, layer) in enumerate(self.gated_layers()):
            weight = layer.weight
            tail = (1,) * (weight.dim() - 2)
            rows = per_layer[index].view(-1, 1, *tail)
            if index:
                rows = rows & per_layer[index - 1].repeat_interleave(
                    self.repeats[index]).view(1, -1, *tail)
            out[f"{name}.weight"] = rows.expand_as(weight).clone()
            if layer.bias is not None:
                out[f"{name}.bias"] = per_layer[index].clone()
        return out

    # ------------------------------------------------------------------- gates
    def tasks(self) -> list[int]:
        """The tasks with an embedding, in the order they got it."""
        return [int(task) for task in self.embeddings]

    def unit_mask(self, task: int) -> torch.Tensor:
        """``task``'s binary mask 1[σ(s_max·e^t) > ½] = 1[e^t > 0], bool, flat."""
        return self.embeddings[str(task)].detach() > 0

    def cumulative_mask(self, tasks: Sequence[int]) -> torch.Tensor:
        """a^{<t}: the union of ``tasks``' binary masks, bool, flat (none: all false)."""
        weight = self.net.get_submodule(self.layer_names[0]).weight
        out = torch.zeros(self.embedding_size, dtype=torch.bool, device=weight.device)
        for task in tasks:
            out |= self.unit_mask(task)
        return out

    def task_gates(self, task: int) -> torch.Tensor | None:
        """``task``'s gates, flat: σ(s·e^t) for the learning task in training mode, its binary
        mask otherwise; ``None`` for a task without an embedding (ungated)."""
        embedding = self.embeddings.get(str(task))
        if embedding is None:
            return None
        if self.training and task == self.learning:
            return torch.sigmoid(self.scale * embedding)
        return (embedding.detach() > 0).to(embedding.dtype)

    def gates(self, task: int) -> list[torch.Tensor | None]:
        """``task``'s gates per layer (:meth:`task_gates` split; ``None`` entries: ungated)."""
        flat = self.task_gates(task)
        return [None] * len(self.units) if flat is None else list(flat.split(self.units))

    def start_learning(self, task: int) -> nn.Parameter:
        """Draw ``task``'s embedding from N(0, 1) and make it the learning task's."""
        weight = self.net.get_submodule(self.layer_names[0]).weight
        embedding = nn.Parameter(torch.randn(self.embedding_size, device=weight.device,
                                             dtype=weight.dtype))
        self.embeddings[str(task)] = embedding
        self.learning = task
        return embedding

    def stop_learning(self) -> None:
        """The learning task's embedding is final: from now on its binary mask gates it (its
        last gradient is dropped)."""
        if self.learning is not None:
            embedding = self.embeddings[str(self.learning)]
            embedding.requires_grad_(False)
            embedding.grad = None
        self.learning = None

    def remove_embedding(self, task: int) -> None:
        """Delete ``task``'s embedding: it runs ungated and holds no unit any more."""
        del self.embeddings[str(task)]

    def _embeddings_from_state(self, state_dict, prefix, *args) -> None:
        """Before loading a state dict: the embeddings it holds, and no other."""
        head = f"{prefix}embeddings."
        saved = {key[len(head):]: value for key, value in state_dict.items()
                 if key.startswith(head)}
        for task in list(self.embeddings):
            if task not in saved:
                del self.embeddings[task]
        for task, value in saved.items():
            if task not in self.embeddings:
                self.embeddings[task] = nn.Parameter(torch.empty_like(value),
                                                     requires_grad=False)

    # ----------------------------------------------------------------- forward
    def gate_output(self, index: int, layer: nn.Module, x: torch.Tensor,
                    output: torch.Tensor) -> torch.Tensor:
        """Gated layer ``index``'s output in the task call in progress: on a backup route
        (:meth:`backup_forward`) the route's units computed with the route's weights, then
        × the task's gates (unchanged outside :meth:`forward`)."""
        if self._gates is None:
            return output
        shape = (1, -1) + (1,) * (output.dim() - 2)
        if self._route is not None:
            weight, bias, units = self._route[index]
            other = (F.linear(x, weight, bias) if isinstance(layer, nn.Linear)
                     else layer._conv_forward(x, weight, bias))
            output = torch.where(units.view(shape), other, output)
        gate = self._gates[index]
        return output if gate is None else output * gate.view(shape)

    def _forward_task(self, x: torch.Tensor, task: int) -> torch.Tensor:
        outer, self._gates = self._gates, self.gates(task)
        try:
            return self.net(x, task)
        finally:
            self._gates = outer

    def forward(self, x: torch.Tensor, task_labels: torch.Tensor | int) -> torch.Tensor:
        """Logits of every sample through its own task's gates and head."""
        if isinstance(task_labels, int):
            return self._forward_task(x, task_labels)
        return forward_by_task(x, task_labels, lambda xs, task, _: self._forward_task(xs, task))

    def forward_single_task(self, x: torch.Tensor, task_label: int) -> torch.Tensor:
        return self.forward(x, task_label)

    def backup_forward(self, x: torch.Tensor, task: int, route: Route) -> torch.Tensor:
        """``task``'s logits of ``x`` where, in every gated layer, the units of ``route``
        come from its weights: per layer (weight, bias, units), the output
        ``where(units, layer(x; weight, bias), layer(x))`` before the gates (CLArena's
        ``AmnesiacHATMLP`` backup forward, ``_route_backup_layer_output_by_mask``)."""
        self._route = route
        try:
            return self._forward_task(x, task)
        finally:
            self._route = None


@torch.no_grad()
def reset_output_(net: TaskIncrementalNet | MultiHeadNet, task: int) -> None:
    """Return ``task``'s output to its never-learned state: its entries of a shared head
    (a TaskIncrementalNet's rows) re-drawn from the initialisation distribution, then
    ``reset_task_parameters_`` (a MultiHeadNet's own head re-drawn, the task's classes
    forgotten)."""
    own = {id(p) for p in net.task_parameters(task)}
    params = dict(net.named_parameters())
    for name, entries in net.head_entries(task).items():
        param = params[name]
        if id(param) not in own:
            module = net.get_submodule(name.rpartition(".")[0])
            param.copy_(torch.where(entries, draw_initial(module, name), param))
    net.reset_task_parameters_(task)


def _check(name: str, value: float, valid: bool, what: str) -> None:
    if not valid:
        raise ValueError(f"{name}={value!r} is invalid; it must be {what}")


class HAT(UnlearningTemplate):
    """HAT (Serrà et al., 2018) on a chain backbone (module docstring); unlearning deletes
    the task's embedding, releasing its units, and re-draws its head (inexact).

    Takes every keyword argument of :class:`UnlearningTemplate`, plus:

    :param model: a :class:`~pall_avalanche.models.TaskIncrementalNet`, an Avalanche
        ``MultiTaskModule`` with a ``MultiHeadClassifier`` (``MTSimpleMLP``) or a
        :class:`HATNet`, whose shared modules are a chain of Linear/Conv2d layers (a ResNet
        or a ViT is refused in one line).
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
        self.s_max = float(s_max)
        self.lamb = float(lamb)
        self.thres_cosh = float(thres_cosh)
        self.thres_emb = float(thres_emb)
        self.clipgrad = float(clipgrad)
        # the learning request's: the network's trained parameters by name, those with
        # frozen entries paired with their 0/1 trainable entries, the tensors trained whole,
        # the embedding, a^{<t} and the batches of the epoch
        self._trained: dict[str, nn.Parameter] = {}
        self._masked: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._whole: list[torch.Tensor] = []
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
        self._trained, self._masked, self._whole = {}, [], []
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
        """One group of :meth:`request_tensors`, without the optimizer's weight decay
        (:meth:`optimizer_step` decays the trainable entries)."""
        return [{"params": self.request_tensors(), "weight_decay": 0.0}]

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
        """Weight decay on the trainable entries and none elsewhere, the embedding's gradient
        compensated, every gradient clipped to ``clipgrad``; the step; the embedding clamped
        to ±``thres_emb``."""
        mask_gradients_([p for p, _ in self._masked], [t for _, t in self._masked],
                        self.weight_decay)
        whole = [p for p in self._whole if p.grad is not None]
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
        self._trained, self._masked, self._whole = {}, [], []
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
      of u's mask m_u are computed with the backup's weights (:meth:`HATNet.backup_forward`)
      under t's gates and head; the loss adds the mean of their CE on t's samples. The
      backups are not gradient-clipped; weight decay applies to them whole. At the end their
      weights are stored as the backups (u, t).
    - Unlearning u: θ ← θ − Δθ_u; then, for every active task t learned after u (oldest
      first, ``compensate_order="forward"``, or newest first), the entries of m_t ∩ m_u
      (minimum of the two ends, :meth:`HATNet.entry_masks`) take backup (u, t)'s values
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
        self._backup_weights: dict[int, dict[str, torch.Tensor]] = {}
        self._routes: dict[int, Route] = {}

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
        self._backup_weights, self._routes = {}, {}
        for other in self.updates:
            weights = {name: value.clone().requires_grad_(True)
                       for name, value in self.before[other].items()}
            units = net.unit_mask(other).split(net.units)
            self._backup_weights[other] = weights
            self._routes[other] = [(weights[f"{name}.weight"], weights.get(f"{name}.bias"),
                                    units[index])
                                   for index, name in enumerate(net.layer_names)]
            self._whole += list(weights.values())

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
                task = self.experience.task_label
                backups = []
                for route in self._routes.values():
                    with self.speed.autocast(self.device):
                        logits = self.model.backup_forward(x, task, route)
                    backups.append(self._criterion(logits.float(), y))
                loss = loss + torch.stack(backups).mean()
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
        for other, weights in self._backup_weights.items():
            self.backups.setdefault(other, {})[task] = {name: w.detach().clone()
                                                        for name, w in weights.items()}
        self._start, self._backup_weights, self._routes = {}, {}, {}
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
        self._statistics = {"compensated_tasks": list(later), "compensated_entries": entries}

    def _make_permanent(self, task: int) -> None:
        """Free Δθ_t, t's backup initialisation and its backups: t is never unlearned."""
        del self.updates[task], self.before[task]
        self.backups.pop(task, None)
