"""WSN: Winning SubNetworks (Kang et al., ICML 2022), with mask deletion as unlearning.

Learning is PALL's (scores → per-layer top-k at connectivity α, straight-through estimator,
earlier tasks' entries frozen but usable, i.e. forward transfer), without re-drawing the
unused entries, without buffer and without retraining. As in the original WSN, **one score
tensor is carried across tasks**: the first learning request draws the scores, every later one
starts from the scores the previous request ended with (re-drawing scores per task is one of
PALL's own changes; docs/fidelity.md, "WSN"). Unlearning deletes the task's mask only: its
weights and the carried scores stay (inexact, F_u = 0).
"""

from __future__ import annotations

import torch
from torch import nn

from pall_avalanche.catalog.declaration import Method
from pall_avalanche.strategies.shared_keys import ALPHA, MASK_THRESHOLD
from pall_avalanche.strategies.subnetwork import SubnetworkStrategy, WeightResettingPlugin

__all__ = ["DECLARATIONS", "WSN"]


class WSN(SubnetworkStrategy):
    """Winning SubNetworks as an Avalanche strategy.

    :param model: a :class:`~pall_avalanche.models.TaskIncrementalNet` or a
        :class:`~pall_avalanche.masks.SubnetworkNet`.
    :param optimizer: its class and hyper-parameters are used for every request; weight decay
        applies to free entries only, never to scores.
    :param alpha: α, per-layer connectivity of a task subnetwork (0.1 ⇒ 90 % sparse).
    :param plugins: further plugins, run after the method's own.
    """

    checkpoint_attributes = ("carried_scores",)

    def __init__(self, *, model: nn.Module, optimizer: torch.optim.Optimizer, alpha: float,
                 plugins=None, **kwargs) -> None:
        self.storing = WeightResettingPlugin(redraw_unused=False)
        #: The scores the last learning request ended with (empty before the first).
        self.carried_scores: list[torch.Tensor] = []
        super().__init__(model=model, optimizer=optimizer, alpha=alpha,
                         plugins=[self.storing, *(plugins or [])], **kwargs)

    @torch.no_grad()
    def start_task(self, task: int) -> None:
        """Scores for ``task``: a fresh draw for the first request, the carried scores after."""
        super().start_task(task)
        if self.carried_scores:
            for score, carried in zip(self.model.scores, self.carried_scores, strict=True):
                score.copy_(carried)

    def _after_training_exp(self, **kwargs) -> None:
        # before the plugins run: the resetting plugin discards the scores
        self.carried_scores[:] = [s.detach().clone() for s in self.model.scores]
        super()._after_training_exp(**kwargs)


DECLARATIONS = (Method("wsn", WSN, exact=False, label="WSN",
                  keys={"alpha": ALPHA, "mask_threshold": MASK_THRESHOLD}),)
