"""The plugin protocol of unlearning strategies, in a module of its own.

:class:`UnlearningPlugin` is what plugins, the evaluation plugin and loggers derive from; it
imports no strategy, so ``pall_avalanche.plugins`` and every other module import on their own
(the strategies import this module, never the other way round).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from avalanche.core import SupervisedPlugin

from pall_avalanche.checkpoint import Stateful

if TYPE_CHECKING:
    from pall_avalanche.strategies.base import UnlearningTemplate

__all__ = ["UnlearningPlugin"]


class UnlearningPlugin(SupervisedPlugin, Stateful):
    """A supervised plugin that can also react to unlearning requests.

    Stateful plugins list what outlives a request in ``checkpoint_attributes``
    (:class:`~pall_avalanche.checkpoint.Stateful`: ``state_dict`` / ``load_state_dict``).
    """

    def before_unlearning(self, strategy: UnlearningTemplate, task: int, **kwargs) -> None:
        """Called before ``task`` leaves ``strategy.active_tasks``."""

    def after_unlearning(self, strategy: UnlearningTemplate, task: int, **kwargs) -> None:
        """Called after the strategy unlearned ``task``."""
