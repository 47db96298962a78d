"""Hypernetworks that generate a task-incremental network's weights from task embeddings
(von Oswald et al., "Continual learning with hypernetworks", ICLR 2020): the chunked
hypernetwork (:class:`ChunkedHypernetwork`) and the network it generates per task
(:class:`GeneratedNetwork`), which :class:`~pall_avalanche.strategies.uncle.UnCLe` trains
and unlearns.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import torch
from avalanche.models import MultiTaskModule
from torch import nn
from torch.func import functional_call
from torch.nn import functional as F

from pall_avalanche.models import TaskIncrementalNet
from pall_avalanche.models.multihead import forward_by_task
from pall_avalanche.models.multitask import MultiHeadNet

__all__ = ["ChunkedHypernetwork", "GeneratedNetwork", "parse_widths"]


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
        """The chunk embeddings drawn so far."""
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

    def fixed_generation(self, tasks: Sequence[int], *, padded: bool = False
                         ) -> tuple[torch.Tensor, int, torch.Tensor | None]:
        """What generating ``tasks``' vectors many times, their embeddings fixed, needs (one
        hypernetwork pass ``hnet(embeddings, length)`` a step, no per-task slicing): (their
        embeddings stacked, detached; the longest vector's length; a 0/1 mask ``(G, length)``
        of each task's own entries, ``None`` when every vector is that long). With
        ``padded``, the length is the longest vector's in whole chunks and every generated
        entry counts (no mask): the hypernetwork's whole output, padding included."""
        sizes = [self.size(task) for task in tasks]
        embeddings = torch.stack([self.embeddings[str(task)].detach() for task in tasks])
        length = max(sizes)
        if padded:
            chunk = self.hnet.chunk_size
            return embeddings, math.ceil(length / chunk) * chunk, None
        if min(sizes) == length:
            return embeddings, length, None
        entries = torch.arange(length) < torch.tensor(sizes).unsqueeze(1)
        return embeddings, length, entries.to(embeddings)

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
