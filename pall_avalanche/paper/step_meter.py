"""Measuring steps: what one step issues and how long the next ones take
(:class:`StepMeter`), bracketing training iterations (:func:`iteration_probes`) and the steps
of unlearning and retraining loops (:func:`probe_loop_steps`); used by
``benchmarks/perf_steps.py`` and ``benchmarks/gpu_check.py``. Imports torch only when a
meter is made."""

from __future__ import annotations

import statistics
import time

__all__ = ["TIMED_STEPS", "StepMeter", "iteration_probes", "probe_loop_steps"]

#: Steps timed per kind (after the one counted).
TIMED_STEPS = 8


class StepMeter:
    """Counts what one step issues (its aten operations; on a GPU also the kernels it
    launches) and times the following ones: process time on the CPU, synchronised wall time
    on a GPU. :meth:`start` and :meth:`stop` bracket a step (training iterations, the steps of
    unlearning loops).

    :param device: where the steps run.
    :param timed: how many steps after the counted one are timed.
    """

    def __init__(self, device: str = "cpu", timed: int = TIMED_STEPS) -> None:
        import torch

        self.cuda = torch.device(device).type == "cuda"
        self.timed = timed
        self.ops: int | None = None
        #: kernels the counted step launched (``None`` off a GPU)
        self.kernels: int | None = None
        self.times: list[float] = []
        #: the run diverged before every step was measured
        self.diverged = False
        self._profile = None
        self._start = 0.0

    def _clock(self) -> float:
        if self.cuda:
            import torch

            torch.cuda.synchronize()
            return time.perf_counter()
        return time.process_time()

    def start(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        if self.ops is None and self._profile is None:
            activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if self.cuda else [])]
            self._profile = profile(activities=activities)
            self._profile.__enter__()
        self._start = self._clock()

    def stop(self) -> None:
        elapsed = self._clock() - self._start
        if self._profile is not None:
            from torch.autograd import DeviceType

            self._profile.__exit__(None, None, None)
            events = self._profile.events()
            self.ops = sum(e.name.startswith("aten::") for e in events)
            if self.cuda:
                self.kernels = sum(e.device_type == DeviceType.CUDA for e in events)
            self._profile = None
        elif len(self.times) < self.timed:
            self.times.append(elapsed)

    def summary(self) -> tuple[int | str | None, float | str | None]:
        """(operations of one step, median seconds per step); ``"diverged"`` for what the
        run did not reach, ``None`` where the method has no such step."""
        if self.diverged and self.ops is None:
            return "diverged", "diverged"
        return self.ops, (statistics.median(self.times) if self.times else None)


def probe_loop_steps(strategy, steps: StepMeter) -> None:
    """Bracket every step of the strategy's unlearning and retraining loops with ``steps``:
    each fresh optimizer starts it after ``zero_grad`` and stops it after ``step``."""
    fresh = strategy.fresh_optimizer

    def probed(param_groups):
        optimizer = fresh(param_groups)
        zero_grad, step = optimizer.zero_grad, optimizer.step

        def started(*args, **kwargs):
            zero_grad(*args, **kwargs)
            steps.start()

        def stopped(*args, **kwargs):
            out = step(*args, **kwargs)
            steps.stop()
            return out

        optimizer.zero_grad, optimizer.step = started, stopped
        return optimizer

    strategy.fresh_optimizer = probed


def iteration_probes(steps: StepMeter, task: int | None = None) -> tuple:
    """Two plugins: the first starts ``steps`` when a training iteration of ``task`` (any
    task: ``None``) begins (put it before every other plugin), the second stops it when the
    iteration ends (put it after them)."""
    from pall_avalanche.core import UnlearningPlugin

    class Start(UnlearningPlugin):
        def before_training_iteration(self, strategy, **kwargs):
            if task is None or strategy.experience.task_label == task:
                steps.start()

    class Stop(UnlearningPlugin):
        def after_training_iteration(self, strategy, **kwargs):
            if task is None or strategy.experience.task_label == task:
                steps.stop()

    return Start(), Stop()
