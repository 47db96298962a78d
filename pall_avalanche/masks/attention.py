"""HAT's gates (Serrà, Surís, Miron and Karatzoglou, "Overcoming catastrophic forgetting with
hard attention to the task", ICML 2018; reference code joansj/hat): :class:`HATNet` gates the
units of a chain backbone per task, with the annealing of the gate scale, the attention
regulariser and the head reset the strategies of :mod:`pall_avalanche.strategies.hat` train
with (their module docstring says how).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from avalanche.models import MultiTaskModule
from torch import nn
from torch.func import vmap
from torch.nn import functional as F

from pall_avalanche.masks.selection import draw_initial
from pall_avalanche.models import TaskIncrementalNet
from pall_avalanche.models.multihead import forward_by_task
from pall_avalanche.models.multitask import MultiHeadNet, task_network

__all__ = ["CHAIN_MODULES", "HATNet", "Route", "annealed_scale", "attention_regulariser",
           "reset_output_"]

#: Modules without children a gated chain may hold between its ``Linear``/``Conv2d`` layers:
#: each commutes with a non-negative per-unit scale (relu(a·z) = a·relu(z) for a ≥ 0;
#: dropout, pooling and flattening act per unit or per channel; an empty ``Sequential``, as
#: Avalanche's ``as_multitask`` leaves in place of the classifier, is the identity), so gating
#: a layer's output is the reference's gating after them.
CHAIN_MODULES = (nn.ReLU, nn.LeakyReLU, nn.Dropout, nn.Dropout2d, nn.Flatten, nn.Identity,
                 nn.Sequential, nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d,
                 nn.AdaptiveMaxPool2d)
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

    def backup_forwards(self, x: torch.Tensor, task: int, routes: Route) -> torch.Tensor:
        """:meth:`backup_forward` of G routes at once, ``(G, n, W)``: every tensor of
        ``routes`` stacked over the G routes (biases ``None`` in all or none), one ``vmap``
        over them."""
        flat = [t for layer in routes for t in layer if t is not None]
        shape = [[t is not None for t in layer] for layer in routes]

        def one(*tensors: torch.Tensor) -> torch.Tensor:
            it = iter(tensors)
            route = [tuple(next(it) if present else None for present in layer)
                     for layer in shape]
            return self.backup_forward(x, task, route)

        return vmap(one, randomness="different")(*flat)


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
