"""The run's subscribers to ``after_request`` besides the request log: the checkpoint writer,
the lock heartbeat and the W&B logger (each one job)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pall_avalanche.checkpoint import CHECKPOINT_FORMAT, capture_rng_state, save_checkpoint
from pall_avalanche.core import RequestResult, UnlearningPlugin
from pall_avalanche.runs.wandb_logging import WandbRun

__all__ = ["CheckpointWriter", "LockHeartbeat", "WandbRequestLogger"]


class CheckpointWriter(UnlearningPlugin):
    """Saves the run's whole state atomically after every request (a subscriber to
    ``after_request``).

    :param path: the checkpoint file (``None``: none is written).
    :param identity: :meth:`RunSpec.identity`.
    :param resumed_after: the request counts the run resumed at (the caller's list, filled
        when the run resumes).
    """

    def __init__(self, path: Path, identity: Mapping[str, Any],
                 resumed_after: list[int]) -> None:
        super().__init__()
        self.path, self.identity, self.resumed_after = path, dict(identity), resumed_after

    def after_request(self, strategy, result: RequestResult, **kwargs) -> None:
        save_checkpoint(self.path, {
            "format": CHECKPOINT_FORMAT, **self.identity, "requests_done": result.index + 1,
            "resumed_after": self.resumed_after, "strategy": strategy.checkpoint_state(),
            "rng": capture_rng_state(),
        })


class LockHeartbeat(UnlearningPlugin):
    """Calls ``heartbeat`` after every request (a subscriber to ``after_request``, after the
    checkpoint writer): the runner refreshes the record's lock with it, so other processes
    see the owner alive.

    :param heartbeat: called once per finished request.
    """

    def __init__(self, heartbeat: Callable[[], Any]) -> None:
        super().__init__()
        self.heartbeat = heartbeat

    def after_request(self, strategy, result: RequestResult, **kwargs) -> None:
        self.heartbeat()


class WandbRequestLogger(UnlearningPlugin):
    """Logs each request to a :class:`~pall_avalanche.runs.wandb_logging.WandbRun` as it ends (a
    subscriber to ``after_request``).

    :param run: the W&B run of the record.
    """

    def __init__(self, run: WandbRun) -> None:
        super().__init__()
        self.run = run

    def after_request(self, strategy, result: RequestResult, **kwargs) -> None:
        self.run.log_request(result)
