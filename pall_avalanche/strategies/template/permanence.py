"""Permanence (the CLPU protocol of Liu, Liu and Stone, CoLLAs 2022): a learned, temporary task
made permanent by a request of its own, after which unlearning it is refused. A permanent
learning request is a learning request (:mod:`.lifecycle` marks it); this mixin carries out
the ``make_permanent`` request and holds what a method says permanence means for it.
"""

from __future__ import annotations

from avalanche.training.utils import trigger_plugins

from pall_avalanche.requests import RequestKind
from pall_avalanche.strategies.template.lifecycle import check_dataless

__all__ = ["Permanence"]


class Permanence:
    """``make_permanent(task)`` and the method's :attr:`permanence`."""

    #: What making a task permanent means for the method (one sentence, for the docs and
    #: the field table); the template's default changes nothing.
    permanence: str = "nothing changes: the task can no longer be unlearned"

    def make_permanent(self, task: int) -> None:
        """Make the learned, temporary ``task`` permanent (CLPU): plugins'
        ``before_making_permanent``, the method's ``_make_permanent`` (:attr:`permanence`
        says what it does), plugins' ``after_making_permanent``; from then on unlearning
        ``task`` is refused."""
        check_dataless(task, False, self.active_tasks, self.permanent_tasks)
        self.model.to(self.device)
        self.start_request(RequestKind.MAKE_PERMANENT, task)
        trigger_plugins(self, "before_making_permanent", task=task)
        self._make_permanent(task)
        self.permanent_tasks.append(task)
        self.made_permanent += 1
        trigger_plugins(self, "after_making_permanent", task=task)
        self.end_request()

    def _make_permanent(self, task: int) -> None:
        """The method's step when ``task`` becomes permanent (still in ``active_tasks``, not
        yet in ``permanent_tasks``). The default changes nothing."""
