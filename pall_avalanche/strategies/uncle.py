"""UnCLe (Adhikari, Kumaravelu and Srijith, "An Unlearning Framework for Continual Learning",
arXiv 2509.17530; reference code github.com/visprasadh/uncle; docs/fidelity.md, "The field").

A hypernetwork h generates every weight of the task network from a learned embedding e_t of
the task (:class:`GeneratedNetwork`): the flat parameter vector of task t, chunk by chunk, is
``h(e_t, c_1) ‖ h(e_t, c_2) ‖ …`` truncated to its length, the c_j fixed chunk embeddings
(:class:`ChunkedHypernetwork`; von Oswald et al., "Continual learning with hypernetworks",
ICLR 2020). The task network is the harness's task-incremental model (backbone plus per-task
heads), called with the generated tensors through ``torch.func.functional_call``; its own
parameters are templates (shapes, Avalanche's head bookkeeping) that no forward pass uses.

- **Learning** task t trains h and e_t on the task loss plus ``β_reg`` times the output
  regulariser: the mean over the other active tasks τ of ``‖h(e_τ) − h*(e_τ)‖²``, h* the
  hypernetwork as it was before the request (von Oswald et al.'s regulariser; the reference's
  ``output_reg``). The other embeddings stay frozen, as in the reference.
- **Unlearning** t is data-free: ``unlearn_steps`` steps on h alone of
  ``R + γ · (1/S) Σ_s ‖h(e_t) − ε_s‖²``, ε_s ~ N(0, I) drawn afresh for each of the
  ``noise_samples`` = S samples of every step (the reference's ``noisy_forget``), R the same
  regulariser over the remaining tasks (the reference's ``remember_reg``). Every later
  unlearning request takes ``int(0.9 ·`` the previous one's steps ``)`` (the reference's
  driver). The hypernetwork's gradient is clipped to norm 1 before every step of both
  (the reference's ``clip_grad_norm_(hnet.parameters(), 1)``). Unlearning is inexact: the
  remaining tasks' generated weights move a little.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import torch
from avalanche.models import MultiTaskModule
from torch import nn
from torch.func import functional_call
from torch.nn import functional as F
from torch.optim import Optimizer

from pall_avalanche.catalog import HYPERNETWORK_SIZE
from pall_avalanche.models import TaskIncrementalNet, count_parameters
from pall_avalanche.models.multihead import forward_by_task
from pall_avalanche.models.multitask import MultiHeadNet, task_network
from pall_avalanche.strategies.base import UnlearningTemplate

__all__ = ["ChunkedHypernetwork", "GeneratedNetwork", "UnCLe", "noise_objective",
           "output_regulariser", "parse_widths"]


def parse_widths(text: str) -> tuple[int, ...]:
    """The hidden layer widths of ``hnet_hidden``: ``"64,64"`` → ``(64, 64)``.

    :raises ValueError: not comma-separated positive integers (at least one).
    """
    try:
        widths = tuple(int(part) for part in str(text).split(","))
    except ValueError:
        widths = ()
    if not widths or min(widths) < 1:
        raise ValueError(f"hnet_hidden={text!r} is invalid; valid: comma-separated positive "
                         "layer widths, e.g. '64,64'")
    return widths


def output_regulariser(generated: Sequence[torch.Tensor], anchors: Sequence[torch.Tensor]
                       ) -> torch.Tensor:
    """The mean over tasks of ``‖generated_τ − anchor_τ‖²`` (sum of squares over the
    parameters): what keeps the tasks' generated weights where they were.

    :param generated: each task's generated parameter vector now.
    :param anchors: the same tasks' vectors before the request (constants).
    """
    total = sum((g - a).pow(2).sum() for g, a in zip(generated, anchors, strict=True))
    return total / len(anchors)


def noise_objective(weights: torch.Tensor, samples: int) -> torch.Tensor:
    """``(1/S) Σ_s ‖weights − ε_s‖²`` with S = ``samples`` fresh draws ε_s ~ N(0, I) of the
    global torch generator on ``weights``' device, one ``(S, len(weights))`` draw (the
    reference's ``noisy_forget``). Computed as ``‖w‖² − 2 w·ε̄ + (1/S) Σ_s ‖ε_s‖²`` (ε̄ the
    draws' mean): the same value, with autograd over one vector instead of S.

    :param weights: a generated parameter vector.
    :param samples: S.
    """
    noise = torch.randn((samples, weights.numel()), device=weights.device, dtype=weights.dtype)
    energy = noise.pow(2).sum() / samples
    return weights.dot(weights) - 2 * weights.dot(noise.mean(0)) + energy


class ChunkedHypernetwork(nn.Module):
    """An MLP from (task embedding ‖ chunk embedding) to one chunk of a flat parameter
    vector: ``Linear → ReLU`` per hidden width, then a linear output of ``chunk_size`` units.

    The chunk embeddings are a buffer of N(0, 1) draws, never trained (in the reference they
    are a plain list outside the hypernetwork's parameters), grown with fresh draws when a
    longer vector is asked for (:meth:`ensure_chunks`).

    :param embedding_dim: width of a task embedding and of a chunk embedding.
    :param hidden: the hidden layer widths.
    :param chunk_size: the entries one chunk generates.
    :param n_chunks: the chunk embeddings drawn now.
    """

    def __init__(self, embedding_dim: int, hidden: Sequence[int], chunk_size: int,
                 n_chunks: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = 2 * embedding_dim
        for units in hidden:
            layers += [nn.Linear(width, units), nn.ReLU()]
            width = units
        layers.append(nn.Linear(width, chunk_size))
        self.mlp = nn.Sequential(*layers)
        self.chunk_size = chunk_size
        self.register_buffer("chunk_embeddings", torch.randn(n_chunks, embedding_dim))

    @property
    def n_chunks(self) -> int:
        return len(self.chunk_embeddings)

    def ensure_chunks(self, n: int) -> None:
        """At least ``n`` chunk embeddings: the missing ones are fresh N(0, 1) draws."""
        if n > self.n_chunks:
            old = self.chunk_embeddings
            extra = torch.randn(n - len(old), old.shape[1]).to(old)
            self.chunk_embeddings = torch.cat([old, extra])

    def forward(self, embeddings: torch.Tensor, size: int) -> torch.Tensor:
        """The first ``size`` generated entries for each task embedding.

        :param embeddings: ``(k, embedding_dim)`` task embeddings.
        :param size: the length of the vectors (at most ``n_chunks · chunk_size``).
        :return: ``(k, size)``: row i is chunk 1, chunk 2, … of embedding i, in order,
            truncated.
        """
        n = math.ceil(size / self.chunk_size)
        if n > self.n_chunks:
            raise ValueError(f"{size} entries need {n} chunks; the hypernetwork has "
                             f"{self.n_chunks} (ensure_chunks first)")
        k, chunks = len(embeddings), self.chunk_embeddings[:n]
        inputs = torch.cat([embeddings[:, None, :].expand(k, n, embeddings.shape[1]),
                            chunks[None].expand(k, n, chunks.shape[1])], dim=2)
        return self.mlp(inputs).reshape(k, n * self.chunk_size)[:, :size]


class GeneratedNetwork(MultiTaskModule):
    """A task-incremental network whose weights a hypernetwork generates from task
    embeddings: each sample of a mini-batch goes through the weights of its own task.

    Task t's generated tensors are, in order, every parameter of ``net`` outside the heads
    (the backbone, shared by all tasks) and then task t's own head: for a
    :class:`~pall_avalanche.models.TaskIncrementalNet` its block of ``classes_per_task`` rows
    of the shared head (the other rows are zeros it never reads), for a
    :class:`~pall_avalanche.models.multitask.MultiHeadNet` the weight and bias of its head at
    their current size (Avalanche grows a head in its task's learning experience only). Buffers
    (a norm layer's running statistics) are ``net``'s own, shared by all tasks.

    :meth:`parameters` are the hypernetwork's and the task embeddings': ``net``'s own
    parameters are templates (shapes, and the heads Avalanche creates and grows), left out of
    them and never used by a forward pass. Every task with a head has an embedding, an N(0, 1)
    draw made when its head appears (:meth:`sync`); a task without a head is answered by
    ``net`` (masked logits).

    :param net: the task-incremental network
        (:func:`~pall_avalanche.models.multitask.task_network`).
    :param hidden: the hypernetwork's hidden layer widths.
    :param chunk_size: the entries one chunk generates.
    :param embedding_dim: width of the task and chunk embeddings.
    """

    def __init__(self, net: TaskIncrementalNet | MultiHeadNet, *, hidden: Sequence[int],
                 chunk_size: int, embedding_dim: int) -> None:
        super().__init__()
        self.net = net
        self.embedding_dim = embedding_dim
        #: (name, shape) of the generated tensors every task shares, in generation order.
        self.shared = [(name, p.shape) for name, p in net.named_parameters()
                       if not self._is_head(name)]
        self._shared_size = sum(shape.numel() for _, shape in self.shared)
        self.hnet = ChunkedHypernetwork(embedding_dim, hidden, chunk_size, 0)
        self.embeddings = nn.ParameterDict()
        self.sync()
        self._register_load_state_dict_pre_hook(self._shapes_from_state)

    def _is_head(self, name: str) -> bool:
        if isinstance(self.net, TaskIncrementalNet):
            return name == "head.weight"
        return name.startswith(f"model.{self.net.head_name}.classifiers.")

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True) -> Iterator[tuple[str, nn.Parameter]]:
        """The hypernetwork's and the task embeddings' parameters (``net``'s are templates:
        class docstring)."""
        templates = f"{prefix}.net." if prefix else "net."
        for name, p in super().named_parameters(prefix, recurse, remove_duplicate):
            if not name.startswith(templates):
                yield name, p

    # ----------------------------------------------------------------- layout
    def head_layout(self, task: int) -> list[tuple[str, torch.Size]]:
        """(name, shape) of ``task``'s own generated tensors, in generation order."""
        if isinstance(self.net, TaskIncrementalNet):
            rows = self.net.classes_per_task
            return [("head.weight", torch.Size((rows, self.net.head.in_features)))]
        prefix = f"model.{self.net.head_name}.classifiers.{task}."
        return [(name, p.shape) for name, p in self.net.named_parameters()
                if name.startswith(prefix)]

    def size(self, task: int) -> int:
        """The length of ``task``'s generated parameter vector."""
        return self._shared_size + sum(shape.numel() for _, shape in self.head_layout(task))

    def sync(self) -> None:
        """Give every task with a head an embedding (a fresh N(0, 1) draw) and the
        hypernetwork enough chunks for every such task (after the network adapted: heads
        appear and grow in training only)."""
        device = self.hnet.chunk_embeddings.device
        tasks = self.net.known_tasks()
        for task in tasks:
            if str(task) not in self.embeddings:
                self.embeddings[str(task)] = nn.Parameter(
                    torch.randn(self.embedding_dim).to(device), requires_grad=False)
        sizes = [self.size(task) for task in tasks] or [self._shared_size]
        self.hnet.ensure_chunks(math.ceil(max(sizes) / self.hnet.chunk_size))

    def _shapes_from_state(self, state_dict, prefix, *args) -> None:
        """Before loading a state dict: the embeddings and the chunk embeddings it holds, each
        of its shape (so a model whose heads grew restores into one built alike)."""
        chunks = state_dict.get(f"{prefix}hnet.chunk_embeddings")
        if chunks is not None and chunks.shape != self.hnet.chunk_embeddings.shape:
            self.hnet.chunk_embeddings = self.hnet.chunk_embeddings.new_zeros(chunks.shape)
        start = f"{prefix}embeddings."
        saved = {key[len(start):] for key in state_dict if key.startswith(start)}
        for task in [t for t in self.embeddings if t not in saved]:
            del self.embeddings[task]
        for task in sorted(saved - set(self.embeddings)):
            self.embeddings[task] = nn.Parameter(
                self.hnet.chunk_embeddings.new_zeros(self.embedding_dim), requires_grad=False)

    # ------------------------------------------------------------- generation
    def generate(self, tasks: Sequence[int]) -> list[torch.Tensor]:
        """Each task's generated parameter vector (one hypernetwork pass for all)."""
        sizes = [self.size(task) for task in tasks]
        if not sizes:
            return []
        rows = self.hnet(torch.stack([self.embeddings[str(task)] for task in tasks]),
                         max(sizes))
        return [row[:size] for row, size in zip(rows, sizes, strict=True)]

    def weights_of(self, task: int, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """``task``'s generated vector ``flat`` as ``net``'s tensors (name → tensor, for
        ``functional_call``); a TaskIncrementalNet's head block is placed at ``task``'s rows
        of the shared head, zeros elsewhere."""
        layout = [*self.shared, *self.head_layout(task)]
        pieces = torch.split(flat, [shape.numel() for _, shape in layout])
        weights = {name: piece.view(shape)
                   for (name, shape), piece in zip(layout, pieces, strict=True)}
        if isinstance(self.net, TaskIncrementalNet):
            rows = self.net.classes_per_task
            weights["head.weight"] = F.pad(weights["head.weight"], (
                0, 0, task * rows, (self.net.n_tasks - 1 - task) * rows))
        return weights

    # ---------------------------------------------------------------- forward
    def forward_task(self, x: torch.Tensor, task: int) -> torch.Tensor:
        """``task``'s logits of ``x`` through its generated weights."""
        if str(task) not in self.embeddings:
            return self.net(x, task)
        (flat,) = self.generate([task])
        return functional_call(self.net, self.weights_of(task, flat), (x, task))

    def forward(self, x: torch.Tensor, task_labels: torch.Tensor | int) -> torch.Tensor:
        return forward_by_task(x, task_labels, lambda xs, task, _: self.forward_task(xs, task))

    def forward_single_task(self, x: torch.Tensor, task_label: int) -> torch.Tensor:
        return self.forward_task(x, task_label)


class UnCLe(UnlearningTemplate):
    """UnCLe: a hypernetwork generates each task's network from its embedding; learning
    regularises the other tasks' generated weights, unlearning drives the task's towards
    noise without data (module docstring).

    Takes every keyword argument of :class:`UnlearningTemplate`, plus:

    :param model: the task network (:func:`~pall_avalanche.models.multitask.task_network`),
        whose weights are generated (:class:`GeneratedNetwork`).
    :param hnet_hidden: the hypernetwork's hidden layer widths, comma-separated.
    :param chunk_size: the entries one chunk of the hypernetwork generates.
    :param embedding_dim: width of the task and chunk embeddings (the reference's 32).
    :param beta_reg: β_reg, the weight of the output regulariser while learning.
    :param gamma_forget: γ, the weight of the noise objective while unlearning.
    :param unlearn_steps: the steps of the first unlearning request (later ones: ×0.9 each).
    :param noise_samples: S, the noise draws averaged per unlearning step (the reference's
        ``n_sampling``).
    """

    table_size = HYPERNETWORK_SIZE
    permanence = ("nothing changes: its generated weights stay anchored by the output "
                  "regulariser like every active task's; it can no longer be unlearned")
    #: The norm the hypernetwork's gradient is clipped to before every step (the reference's).
    max_grad_norm: float = 1.0
    #: Each unlearning request's steps are ``int(unlearn_decay ·`` the previous one's ``)``
    #: (the reference's driver).
    unlearn_decay: float = 0.9

    def __init__(self, *, model: nn.Module, hnet_hidden: str = "64,64", chunk_size: int = 2048,
                 embedding_dim: int = 32, beta_reg: float = 0.1, gamma_forget: float = 1.0,
                 unlearn_steps: int = 300, noise_samples: int = 10, **kwargs) -> None:
        hidden = parse_widths(hnet_hidden)
        for name, value, low in (("chunk_size", chunk_size, 1), ("embedding_dim", embedding_dim, 1),
                                 ("unlearn_steps", unlearn_steps, 0),
                                 ("noise_samples", noise_samples, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name}={value!r} is invalid; valid: an integer >= {low}")
        for name, value in (("beta_reg", beta_reg), ("gamma_forget", gamma_forget)):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{name}={value!r} is invalid; valid: a finite number >= 0")
        self.beta_reg, self.gamma_forget = float(beta_reg), float(gamma_forget)
        self.unlearn_steps, self.noise_samples = unlearn_steps, noise_samples
        #: The tasks the output regulariser anchors in the learning request in progress, and
        #: their generated vectors before it.
        self._anchored: list[int] = []
        self._anchors: list[torch.Tensor] = []
        net = task_network(model, kwargs.get("n_tasks"))
        super().__init__(model=GeneratedNetwork(net, hidden=hidden, chunk_size=chunk_size,
                                                embedding_dim=embedding_dim), **kwargs)

    # -------------------------------------------------------------- learning
    def model_adaptation(self, model=None):
        """Avalanche's adaptation; in training, new or grown heads then get their embedding
        and chunks (:meth:`GeneratedNetwork.sync`)."""
        model = super().model_adaptation(model)
        if self.is_training:
            model.sync()
        return model

    def optimizer_param_groups(self) -> list[dict]:
        """The hypernetwork and the embedding of the task being learned (one group)."""
        embedding = self.model.embeddings[str(self.experience.task_label)]
        return [{"params": [*self.model.hnet.parameters(), embedding]}]

    def _before_training_exp(self, **kwargs) -> None:
        super()._before_training_exp(**kwargs)
        self.model.embeddings[str(self.experience.task_label)].requires_grad_(True)
        self._anchored = list(self.active_tasks)
        with torch.no_grad():
            self._anchors = self.model.generate(self._anchored)

    def _before_backward(self, **kwargs) -> None:
        if self._anchored and self.beta_reg:
            self.loss += self.beta_reg * output_regulariser(
                self.model.generate(self._anchored), self._anchors)
        super()._before_backward(**kwargs)

    def _after_backward(self, **kwargs) -> None:
        self._clip_gradients()
        super()._after_backward(**kwargs)

    def _after_training_exp(self, **kwargs) -> None:
        self.model.embeddings[str(self.experience.task_label)].requires_grad_(False)
        self._anchored, self._anchors = [], []
        super()._after_training_exp(**kwargs)

    def _clip_gradients(self) -> None:
        torch.nn.utils.clip_grad_norm_(self.model.hnet.parameters(), self.max_grad_norm)

    def fresh_optimizer(self, param_groups: list[dict]) -> Optimizer:
        """The template's fresh optimizer, clipping the hypernetwork's gradient before every
        step."""
        optimizer = super().fresh_optimizer(param_groups)
        optimizer.register_step_pre_hook(lambda *_: self._clip_gradients())
        return optimizer

    # ------------------------------------------------------------ unlearning
    def unlearning_steps(self) -> int:
        """The steps of the unlearning request in progress: ``unlearn_steps`` for the run's
        first, ``int(unlearn_decay ·`` the previous one's ``)`` for each later one (the
        number of earlier ones is learned − active − 1: the task has left ``active_tasks``)."""
        steps = self.unlearn_steps
        for _ in range(self.clock.train_exp_counter - len(self.active_tasks) - 1):
            steps = int(steps * self.unlearn_decay)
        return steps

    def _unlearn(self, task: int) -> None:
        """Drive ``task``'s generated weights towards noise, the remaining tasks' kept by the
        regulariser; no data is read."""
        remaining = list(self.active_tasks)
        with torch.no_grad():
            anchors = self.model.generate(remaining)

        def loss() -> torch.Tensor:
            *kept, forgotten = self.model.generate([*remaining, task])
            total = self.gamma_forget * noise_objective(forgotten, self.noise_samples)
            if remaining:
                total = total + output_regulariser(kept, anchors)
            return total

        steps = self.unlearning_steps()
        self.optimization_steps([{"params": list(self.model.hnet.parameters())}], steps, loss)
        self._statistics = {"unlearning_steps": steps}

    # ------------------------------------------------------------------ size
    def inference_size(self, n_tasks: int | None = None) -> tuple[int, int]:
        """(h + n · E float parameters, no mask bits): the hypernetwork with its chunk
        embeddings, plus one embedding of ``embedding_dim`` floats per task.

        :param n_tasks: n (default: the active tasks).
        """
        n = len(self.active_tasks) if n_tasks is None else n_tasks
        hnet = self.model.hnet
        return (count_parameters(hnet) + hnet.chunk_embeddings.numel()
                + n * self.model.embedding_dim), 0
