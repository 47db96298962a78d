"""WSN: Winning SubNetworks (Kang et al., ICML 2022), with mask deletion as unlearning.

Learning is PALL's (scores → per-layer top-k at connectivity α, straight-through estimator,
earlier tasks' entries frozen but usable, i.e. forward transfer), without re-drawing the
unused entries, without buffer and without retraining. Unlearning deletes the task's mask
only: its weights stay in the network (inexact, F_u = 0; protocol §6).
"""

from __future__ import annotations

import torch
from torch import nn

from pall_avalanche.plugins import WeightResettingPlugin
from pall_avalanche.strategies.subnetwork import SubnetworkStrategy

__all__ = ["WSN"]


class WSN(SubnetworkStrategy):
    """Winning SubNetworks as an Avalanche strategy.

    :param model: a :class:`~pall_avalanche.models.TaskIncrementalNet` or a
        :class:`~pall_avalanche.masks.SubnetworkNet`.
    :param optimizer: its class and hyper-parameters are used for every request; weight decay
        applies to free entries only, never to scores.
    :param alpha: α, per-layer connectivity of a task subnetwork (0.1 ⇒ 90 % sparse).
    :param plugins: further plugins, run after the method's own.
    """

    def __init__(self, *, model: nn.Module, optimizer: torch.optim.Optimizer, alpha: float,
                 plugins=None, **kwargs) -> None:
        self.storing = WeightResettingPlugin(redraw_unused=False)
        super().__init__(model=model, optimizer=optimizer, alpha=alpha,
                         plugins=[self.storing, *(plugins or [])], **kwargs)
