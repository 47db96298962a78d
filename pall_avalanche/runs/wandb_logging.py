"""Optional Weights & Biases logging: one W&B run per (method, seed) result record.

Avalanche's ``WandBLogger`` does not work with wandb 0.31 (``wandb.util.generate_id`` and
``wandb.viz`` are gone), so this module is a small logger of its own:

- :class:`WandbSettings` holds the ``--wandb*`` flags (:func:`add_wandb_arguments`,
  :meth:`WandbSettings.from_args`); ``None`` means W&B is off.
- :func:`wandb_run` opens one run per record. :meth:`WandbRun.log_request` logs (called by the
  runner's ``after_request`` subscriber), as
  each request happens, the request's row of the accuracy matrix, its timing and the model
  size (W&B step = request index); :meth:`WandbRun.log_record` logs the final metrics
  (summary), the accuracy matrix as a ``wandb.Table`` and as a heatmap image, the model size
  and the timings.
- :func:`log_table` logs a script's aggregated table in a run of its own (``job_type``
  ``"table"``, same group as the records' runs).

W&B must never cost a result: every W&B call is guarded; the first failure warns once and
turns W&B off for the rest of the process (a dead server would otherwise cost the init
timeout for every run), and training and record writing go on. ``wandb`` is imported only
when a run is opened, so nothing touches W&B or the network without ``--wandb``.
"""

from __future__ import annotations

import argparse
import io
import math
import os
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pall_avalanche.config import config_hash
from pall_avalanche.heatmap import draw_accuracy
from pall_avalanche.requests import Request, RequestKind

if TYPE_CHECKING:
    from pall_avalanche.core import RequestResult

__all__ = [
    "WANDB_MODES",
    "WandbRun",
    "WandbSettings",
    "add_wandb_arguments",
    "default_group",
    "log_table",
    "wandb_disabled_reason",
    "wandb_run",
]

WANDB_MODES = ("online", "offline", "disabled")
DEFAULT_PROJECT = "pall-avalanche"

# Set on the first W&B failure in this process: W&B stays off afterwards.
_DISABLED: list[str] = []


def wandb_disabled_reason() -> str | None:
    """Why W&B was turned off in this process (the first failure), or ``None``."""
    return _DISABLED[0] if _DISABLED else None


def _fail(what: str, err: BaseException) -> None:
    if not _DISABLED:
        _DISABLED.append(f"{what}: {type(err).__name__}: {err}")
        warnings.warn(f"W&B {what} failed ({type(err).__name__}: {err}); W&B logging is off "
                      "for the rest of this process, results are still written to disk",
                      RuntimeWarning, stacklevel=3)


@dataclass(frozen=True)
class WandbSettings:
    """Where and how runs are logged.

    :param project: W&B project; ``None``: ``$WANDB_PROJECT`` or ``pall-avalanche`` (a sweep
        agent's runs always go to the sweep's project).
    :param entity: W&B entity (user or team); ``None``: the default of the logged-in user.
    :param group: run group; ``None``: ``<benchmark>-<configuration hash>`` so the seeds of
        one configuration sit together.
    :param tags: run tags.
    :param mode: ``online``, ``offline`` or ``disabled``; ``None``: ``$WANDB_MODE`` or online.
    """

    project: str | None = None
    entity: str | None = None
    group: str | None = None
    tags: tuple[str, ...] = field(default_factory=tuple)
    mode: str | None = None

    def __post_init__(self) -> None:
        if self.mode is not None and self.mode not in WANDB_MODES:
            raise ValueError(f"W&B mode {self.mode!r} is invalid; valid modes are "
                             f"{', '.join(WANDB_MODES)}")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> WandbSettings | None:
        """The settings of parsed ``--wandb*`` flags; ``None`` without ``--wandb``.

        :param args: a namespace from a parser given :func:`add_wandb_arguments`.
        """
        if not getattr(args, "wandb", False):
            return None
        tags = tuple(t.strip() for t in (args.wandb_tags or "").split(",") if t.strip())
        return cls(project=args.wandb_project, entity=args.wandb_entity,
                   group=args.wandb_group, tags=tags, mode=args.wandb_mode)


def add_wandb_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--wandb``, ``--wandb-project``, ``--wandb-entity``, ``--wandb-group``,
    ``--wandb-tags`` and ``--wandb-mode`` to ``parser``.

    :param parser: the script's parser.
    """
    group = parser.add_argument_group("Weights & Biases (optional; off without --wandb)")
    group.add_argument("--wandb", action="store_true",
                       help="log one W&B run per (method, seed) record, live per request")
    group.add_argument("--wandb-project",
                       help=f"W&B project (default $WANDB_PROJECT, else {DEFAULT_PROJECT})")
    group.add_argument("--wandb-entity", help="W&B entity (default: your default entity)")
    group.add_argument("--wandb-group",
                       help="W&B run group (default <benchmark>-<configuration hash>)")
    group.add_argument("--wandb-tags", help="comma-separated W&B run tags")
    group.add_argument("--wandb-mode", choices=WANDB_MODES,
                       help="W&B mode (default: $WANDB_MODE, else online)")


def default_group(config: Mapping[str, Any]) -> str:
    """The default W&B group of a run configuration: ``<benchmark>-<hash>``, the hash over
    every key but ``seeds`` (so the seeds and methods of one table share a group).

    :param config: a full configuration (as given to ``run_experiments``).
    """
    digest = config_hash({k: v for k, v in config.items() if k != "seeds"})
    return f"{config.get('benchmark', 'run')}-{digest}"


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(
        value)


def _heatmap_image(accuracy: Sequence[Sequence[float]], row_labels: Sequence[str]):
    """The accuracy matrix as a PIL image (rows: requests, columns: tasks)."""
    from matplotlib.figure import Figure
    from PIL import Image

    n_rows, n_cols = len(accuracy), len(accuracy[0])
    fig = Figure(figsize=(1.2 + 0.7 * n_cols, 0.8 + 0.45 * n_rows))
    ax = fig.add_subplot()
    draw_accuracy(ax, accuracy, row_labels, values=True)
    ax.set_ylabel("request")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    buffer.seek(0)
    return Image.open(buffer).convert("RGB")


class WandbRun:
    """One guarded W&B run; a no-op when W&B is off or has failed.

    :param settings: ``None`` for a no-op run.
    :param name: display name.
    :param config: the run's config (for records: the resolved configuration).
    :param job_type: W&B job type (``"record"`` or ``"table"``).
    :param group: run group (overrides ``settings.group``).
    """

    def __init__(self, settings: WandbSettings | None, *, name: str,
                 config: Mapping[str, Any], job_type: str, group: str | None = None):
        self._run = None
        self._wandb = None
        if settings is None or _DISABLED:
            return

        def init():
            import wandb

            self._wandb = wandb
            self._run = wandb.init(
                project=settings.project or os.environ.get("WANDB_PROJECT") or DEFAULT_PROJECT,
                entity=settings.entity,
                group=settings.group or group, tags=list(settings.tags) or None,
                mode=settings.mode or os.environ.get("WANDB_MODE"), name=name,
                job_type=job_type, config=dict(config), dir=os.environ.get("WANDB_DIR"),
                # wandb reads its environment once per process: honour changes per run
                settings=wandb.Settings(init_timeout=float(
                    os.environ.get("WANDB_INIT_TIMEOUT", 90))),
            )

        self._call("init", init)

    @property
    def active(self) -> bool:
        """Whether W&B calls reach a live run."""
        return self._run is not None and not _DISABLED

    def _call(self, what: str, fn: Callable[[], Any]) -> None:
        if self._run is None and what != "init":
            return
        if _DISABLED:
            return
        try:
            fn()
        except Exception as err:  # W&B must never end a run
            _fail(what, err)
            self._run = None

    def log(self, data: Mapping[str, Any], step: int | None = None) -> None:
        """``run.log(data, step=step)``, guarded.

        :param data: key → value.
        :param step: the W&B step (request index for record runs).
        """
        self._call("log", lambda: self._run.log(dict(data), step=step))

    def log_request(self, result: RequestResult) -> None:
        """Log one request (W&B step = its index): its kind and task, the accuracy of every
        task after it, the mean over the active tasks, its timing, the model size and the
        method's statistics (under ``unlearning/``).

        :param result: the request's result (the template's ``after_request`` event).
        """
        timing = result.timing()
        data: dict[str, Any] = {
            "request/kind": result.kind, "request/task": result.task,
            "request/is_unlearn": int(result.kind == RequestKind.UNLEARN),
            "time/seconds": result.seconds, "model_size_mb": result.model_size_mb,
        }
        if timing.get("seconds_per_epoch") is not None:
            data["time/seconds_per_epoch"] = timing["seconds_per_epoch"]
        data.update({f"accuracy/task{t}": a for t, a in enumerate(result.accuracy)})
        if result.active_tasks:
            data["accuracy/active_mean"] = sum(
                result.accuracy[t] for t in result.active_tasks) / len(result.active_tasks)
        data.update({f"unlearning/{k}": v for k, v in result.statistics.items() if _finite(v)})
        self.log(data, step=result.index)

    def log_record(self, record: Mapping[str, Any], path: str | Path | None = None) -> None:
        """Log a finished record: metrics, model size and timings as the run summary, the
        accuracy matrix as a table and as a heatmap image.

        :param record: a result record (``runs.run_record``).
        :param path: where the record was written (kept in the summary).
        """
        def body():
            wandb = self._wandb
            summary = {f"metrics/{k}": v for k, v in record["metrics"].items() if _finite(v)}
            summary["model_size_mb"] = record["model_size_mb"]
            summary["exact"] = record["exact"]
            for key in ("learn_seconds_per_epoch", "unlearn_seconds"):
                if _finite(record["timings"].get(key)):
                    summary[f"time/{key}"] = record["timings"][key]
            if path is not None:
                summary["record_path"] = str(path)
            labels = [f"{i} {Request(**r)}" for i, r in enumerate(record["requests"])]
            n_tasks = len(record["accuracy"][0])
            table = wandb.Table(
                columns=["request", "kind", "task", *[f"task{t}" for t in range(n_tasks)]],
                data=[[i, r["kind"], r["task"], *row] for i, (r, row) in
                      enumerate(zip(record["requests"], record["accuracy"], strict=True))])
            self._run.log({"accuracy_matrix": table,
                           "accuracy_heatmap": wandb.Image(
                               _heatmap_image(record["accuracy"], labels),
                               caption="accuracy (%) after each request")},
                          step=len(record["requests"]))
            # after the last history row: W&B's summary takes the newest value of a key
            self._run.summary.update(summary)

        self._call("log_record", body)

    def finish(self, exit_code: int = 0) -> None:
        """Finish the run (guarded).

        :param exit_code: 0 for success; non-zero marks the run failed.
        """
        run, self._run = self._run, None
        if run is None:
            return
        try:
            run.finish(exit_code=exit_code)
        except Exception as err:  # W&B must never end a run
            _fail("finish", err)


@contextmanager
def wandb_run(settings: WandbSettings | None, *, method: str, seed: int,
              config: Mapping[str, Any], group: str | None = None,
              identity: str | None = None) -> Iterator[WandbRun]:
    """One W&B run for the record of (``method``, ``seed``), named
    ``<method>-seed<seed>-<identity>`` (several settings of one method, e.g. Table 1's three
    PALL α, share a group); finished on exit (failed if the block raised). A no-op run when
    ``settings`` is ``None``.

    :param settings: W&B settings or ``None``.
    :param method: the method's name.
    :param seed: the seed.
    :param config: what the record is the result of (logged as the run's config): the
        resolved configuration, plus the replayed requests or training seed when given.
    :param group: default group when ``settings.group`` is not set.
    :param identity: the record's hash (its folder; ``runs.RunSpec.hash``); ``None``: the
        hash of ``config``.
    """
    name = identity if identity is not None else config_hash(config)
    run = WandbRun(settings, name=f"{method}-seed{seed}-{name}", job_type="record", group=group,
                   config={**config, "method": method, "seed": seed})
    try:
        yield run
    except BaseException:
        run.finish(exit_code=1)
        raise
    run.finish()


def log_table(settings: WandbSettings | None, name: str, frame, *,
              config: Mapping[str, Any] | None = None, markdown: str | None = None,
              group: str | None = None) -> None:
    """Log an aggregated table (a pandas frame) as ``wandb.Table`` in a run of its own
    (``job_type="table"``). Skipped under a sweep agent (``WANDB_SWEEP_ID``), whose process
    owns exactly one run: aggregate a sweep with ``python -m pall_avalanche.reports``.

    :param settings: W&B settings or ``None`` (no-op).
    :param name: run name and table key (e.g. ``table1_digits``).
    :param frame: the table.
    :param config: the configuration the table was run with.
    :param markdown: the Markdown rendering, kept in the summary.
    :param group: default group when ``settings.group`` is not set.
    """
    if settings is None or os.environ.get("WANDB_SWEEP_ID"):
        return
    run = WandbRun(settings, name=name, job_type="table", group=group, config=config or {})

    def body():
        run._run.log({name: run._wandb.Table(dataframe=frame)})
        if markdown is not None:
            run._run.summary["markdown"] = markdown

    run._call("log_table", body)
    run.finish()
