"""UnCLe (Adhikari, Kumaravelu and Srijith, "An Unlearning Framework for Continual Learning",
arXiv 2509.17530; reference code github.com/visprasadh/uncle; docs/fidelity.md, "The field").

A hypernetwork h generates every weight of the task network from a learned embedding e_t of
the task (:class:`~pall_avalanche.models.hypernetwork.GeneratedNetwork`): the flat parameter
vector of task t, chunk by chunk, is ``h(e_t, c_1) ‖ h(e_t, c_2) ‖ …`` truncated to its
length, the c_j fixed chunk embeddings
(:class:`~pall_avalanche.models.hypernetwork.ChunkedHypernetwork`; von Oswald et al.,
"Continual learning with hypernetworks", ICLR 2020). The task network is the harness's
task-incremental model (backbone plus per-task heads), called with the generated tensors
through ``torch.func.functional_call``; its own parameters are templates (shapes,
Avalanche's head bookkeeping) that no forward pass uses.

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

import torch
from torch import nn
from torch.optim import Optimizer

from pall_avalanche.catalog import HYPERNETWORK_SIZE
from pall_avalanche.catalog.declaration import Key, Method
from pall_avalanche.models import count_parameters
from pall_avalanche.models.hypernetwork import GeneratedNetwork, parse_widths
from pall_avalanche.models.multitask import task_network
from pall_avalanche.strategies.base import UnlearningTemplate

__all__ = ["DECLARATIONS", "NORMS", "UnCLe", "noise_objective", "output_regulariser"]

#: Over which vector UnCLe's two norms run (:class:`UnCLe`'s ``norms``).
NORMS = ("parameters", "padded")


def output_regulariser(generated: torch.Tensor, anchors: torch.Tensor,
                       entries: torch.Tensor | None = None) -> torch.Tensor:
    """The mean over tasks of ``‖generated_τ − anchor_τ‖²`` (sum of squares over the
    parameters): what keeps the tasks' generated weights where they were; all tasks in one
    sum.

    :param generated: each task's generated parameter vector now, one row each ``(G, L)``.
    :param anchors: the same tasks' vectors before the request ``(G, L)`` (a constant).
    :param entries: 0/1 ``(G, L)``, each task's own entries of a row longer than its vector
        (:meth:`~pall_avalanche.models.hypernetwork.GeneratedNetwork.fixed_generation`);
        ``None``: every entry.
    """
    squares = (generated - anchors).square()
    return (squares if entries is None else squares * entries).sum() / len(generated)


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


class UnCLe(UnlearningTemplate):
    """UnCLe: a hypernetwork generates each task's network from its embedding; learning
    regularises the other tasks' generated weights, unlearning drives the task's towards
    noise without data (module docstring).

    Takes every keyword argument of :class:`UnlearningTemplate`, plus:

    :param model: the task network (:func:`~pall_avalanche.models.multitask.task_network`),
        whose weights are generated (:class:`~pall_avalanche.models.hypernetwork.GeneratedNetwork`).
    :param hnet_hidden: the hypernetwork's hidden layer widths, comma-separated.
    :param chunk_size: the entries one chunk of the hypernetwork generates.
    :param embedding_dim: width of the task and chunk embeddings (the reference's 32).
    :param beta_reg: β_reg, the weight of the output regulariser while learning.
    :param gamma_forget: γ, the weight of the noise objective while unlearning.
    :param unlearn_steps: the steps of the first unlearning request (later ones: ×0.9 each;
        100, the reference's number; digits sets 300: configs/digits.yaml).
    :param noise_samples: S, the noise draws averaged per unlearning step (the reference's
        ``n_sampling``).
    :param norms: over which vector the regulariser's and the noise objective's norms run:
        ``"parameters"`` (the default), each task's parameter vector, the entries the network
        reads; ``"padded"``, the hypernetwork's whole output, the last chunk's padding
        included, as the reference runs them over its padded per-layer output
        (``toolbox/regularisation.py``). The default is ours because the chunks here are flat
        (the reference chunks each layer): the padding is up to ``chunk_size`` − 1 entries of
        one last chunk, so counting it would make β and γ weigh differently for every
        ``chunk_size``.
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
                 unlearn_steps: int = 100, noise_samples: int = 10,
                 norms: str = "parameters", **kwargs) -> None:
        if norms not in NORMS:
            raise ValueError(f"norms={norms!r} is invalid; valid: {', '.join(NORMS)}")
        self.padded = norms == "padded"
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
        #: The tasks the output regulariser anchors in the learning request in progress,
        #: their fixed generation (embeddings, length, entries) and their generated vectors
        #: before it (rows).
        self._anchored: list[int] = []
        self._generation: tuple[torch.Tensor, int, torch.Tensor | None] | None = None
        self._anchors: torch.Tensor | None = None
        net = task_network(model, kwargs.get("n_tasks"))
        super().__init__(model=GeneratedNetwork(net, hidden=hidden, chunk_size=chunk_size,
                                                embedding_dim=embedding_dim), **kwargs)

    # -------------------------------------------------------------- learning
    def model_adaptation(self, model=None):
        """Avalanche's adaptation; in training, new or grown heads then get their embedding
        and chunks (:meth:`~pall_avalanche.models.hypernetwork.GeneratedNetwork.sync`)."""
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
        if self._anchored:
            self._generation = self.model.fixed_generation(self._anchored,
                                                           padded=self.padded)
            with torch.no_grad():
                self._anchors = self.model.hnet(*self._generation[:2])

    def _before_backward(self, **kwargs) -> None:
        if self._anchored and self.beta_reg:
            embeddings, length, entries = self._generation
            self.loss += self.beta_reg * output_regulariser(
                self.model.hnet(embeddings, length), self._anchors, entries)
        super()._before_backward(**kwargs)

    def _after_backward(self, **kwargs) -> None:
        self._clip_gradients()
        super()._after_backward(**kwargs)

    def _after_training_exp(self, **kwargs) -> None:
        self.model.embeddings[str(self.experience.task_label)].requires_grad_(False)
        self._anchored, self._generation, self._anchors = [], None, None
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
        embeddings, length, entries = self.model.fixed_generation([*remaining, task],
                                                                  padded=self.padded)
        size = length if self.padded else self.model.size(task)
        with torch.no_grad():
            anchors = self.model.hnet(embeddings, length)[:-1]

        def loss() -> torch.Tensor:
            rows = self.model.hnet(embeddings, length)
            total = self.gamma_forget * noise_objective(rows[-1, :size], self.noise_samples)
            if remaining:
                total = total + output_regulariser(
                    rows[:-1], anchors, None if entries is None else entries[:-1])
            return total

        steps = self.unlearning_steps()
        self.optimization_steps([{"params": list(self.model.hnet.parameters())}], steps, loss)
        self.record_statistics(unlearning_steps=steps)

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


#: UnCLe's keys, at the values of its reference code (``visprasadh/uncle``) where it has one.
DECLARATIONS = (Method("uncle", UnCLe, exact=False, label="UnCLe", keys={
    "hnet_hidden": Key("64,64", "the hypernetwork's hidden layer widths, comma-separated"),
    "chunk_size": Key(2048, "the entries one chunk of the hypernetwork generates", low=1),
    "embedding_dim": Key(32, "width of the task and chunk embeddings", low=1),
    "beta_reg": Key(0.1, "β_reg, the weight of the output regulariser while learning", low=0),
    "gamma_forget": Key(1.0, "γ, the weight of the noise objective while unlearning", low=0),
    "unlearn_steps": Key(100, "the steps of the first unlearning request (later ones: ×0.9 "
                         "each)", low=0),
    "noise_samples": Key(10, "S, the noise draws averaged per unlearning step", low=1),
    "norms": Key("parameters", "the vector the regulariser's and the noise objective's norms "
                 "run over: parameters (the entries the network reads) or padded (the "
                 "hypernetwork's whole output, as the reference)", choices=NORMS),
}),)
