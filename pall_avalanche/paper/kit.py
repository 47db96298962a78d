"""The one path every paper script takes: parse → grid of configuration overrides × methods ×
seeds → records (:func:`~pall_avalanche.runs.run_experiments`, resumable) → frame →
report (:mod:`pall_avalanche.reports`).

A script in ``benchmarks/`` declares its sweep as :class:`GridPoint` objects and its table
layout; parsing, configuration defaults the user did not override, running and writing the
report with its provenance preamble are here, so no script has a run loop of its own.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from pall_avalanche.catalog import method_label
from pall_avalanche.cli import (
    Parser,
    add_run_arguments,
    config_from_args,
    flag_keys,
    parse_methods,
    parse_run_arguments,
    run_options,
)
from pall_avalanche.config import CONFIG_DIR, parse_override, resolve_method_config
from pall_avalanche.exit_codes import RunsLeftOut, program_name
from pall_avalanche.reports import FAILED_MARK, provenance, record_failed_learning, write_report
from pall_avalanche.requests import RequestSequence
from pall_avalanche.runs.spec import plan
from pall_avalanche.runs.wandb_logging import WandbSettings, default_group, log_table

__all__ = [
    "GridPoint",
    "ScriptRun",
    "closing_summary",
    "finish",
    "finish_report",
    "left_out_notes",
    "run_grid",
    "script_parser",
    "start_script",
]


@dataclass(frozen=True)
class GridPoint:
    """One setting of a sweep.

    :param label: how the table names the setting (``"N_f=10"``, ``"buffer 200"``).
    :param overrides: configuration keys set for this setting (dotted keys allowed).
    :param methods: the methods run at this setting (``None``: the script's methods).
    :param requests: a fixed request sequence for every seed (``None``: generated per seed).
    """

    label: str
    overrides: Mapping[str, Any] = field(default_factory=dict)
    methods: Sequence[str] | None = None
    requests: RequestSequence | list | None = None


@dataclass
class ScriptRun:
    """A parsed script invocation.

    :param args: the parsed arguments.
    :param methods: the methods selected with ``--methods``.
    :param config: the configuration (file + flags + ``--set`` + script defaults).
    :param seeds: the seeds to run.
    :param requests: a replayed request sequence (``--requests``) or ``None``.
    :param command: the exact command line, for the report's preamble.
    :param explicit: configuration keys the user set on the command line.
    """

    args: argparse.Namespace
    methods: list[str]
    config: dict[str, Any]
    seeds: list[int]
    requests: RequestSequence | None
    command: str
    explicit: set[str]
    #: Records computed and reused so far (:func:`run_grid`), for :func:`closing_summary`.
    stats: dict[str, int] = field(default_factory=dict)
    #: The runs that diverged and have no record (name: why), for the report and the exit.
    left_out: list[str] = field(default_factory=list)

    def default(self, key: str, value: Any) -> None:
        """Set configuration ``key`` to the script's default unless the user set it."""
        if key not in self.explicit:
            self.config[key] = value

    def default_for(self, method: str, key: str, value: Any) -> None:
        """Set ``key`` for ``method`` alone (its ``methods:`` entry) to the script's default
        unless the user set the key on the command line, for every method or for this one."""
        if key not in self.explicit and f"methods.{method}.{key}" not in self.explicit:
            self.config.setdefault("methods", {}).setdefault(method, {})[key] = value

    @property
    def n_tasks(self) -> int:
        return int(self.config["n_tasks"])

    def value(self, key: str, method: str = "pall") -> Any:
        """``key``'s value in ``method``'s resolved configuration (a method key such as
        ``alpha`` is its default unless the configuration sets it)."""
        return resolve_method_config(self.config, method)[key]

    def pick(self, methods: Sequence[str]) -> list[str]:
        """``methods`` restricted to (and in the order of) those the user selected."""
        return [m for m in methods if m in self.methods]


def script_parser(doc: str, *, name: str, default_methods: Sequence[str]
                  ) -> argparse.ArgumentParser:
    """The common arguments of a paper script (:func:`~pall_avalanche.cli.add_run_arguments`),
    records under ``results/<name>``, and the script's default methods."""
    parser = Parser(prog=f"{name}.py", description=doc.split("\n\n")[0], epilog=doc,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(parser, default_out=f"results/{name}")
    parser.set_defaults(methods=",".join(default_methods))
    return parser


def start_script(parser: argparse.ArgumentParser, argv: Sequence[str] | None, *, script: str
                 ) -> ScriptRun:
    """Parse ``argv`` and build the configuration.

    :param parser: from :func:`script_parser`, plus the script's own sweep flags.
    :param argv: the arguments (``None``: ``sys.argv[1:]``).
    :param script: the script's path as run (``benchmarks/fig3.py``), for the preamble.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_run_arguments(parser, argv)
    methods = parse_methods(args.methods)
    config, seeds, requests = config_from_args(args, CONFIG_DIR)
    explicit = {key for flag, key in flag_keys().items() if getattr(args, flag, None) is not None}
    explicit |= {parse_override(text)[0] for text in args.overrides}
    for text in args.overrides:
        key = parse_override(text)[0]
        method = key.split(".")[1] if key.startswith("methods.") else None
        if method is not None and method not in methods:
            raise ValueError(
                f"--set {text}: {method} is not among this run's methods "
                f"({', '.join(methods)}), so the setting would change nothing; add it: "
                f"--methods {method}[,...]")
    command = f"{program_name(f'python {script}')} {shlex.join(argv)}".strip()
    return ScriptRun(args, methods, config, seeds, requests, command, explicit)


def run_grid(points: Sequence[GridPoint], run: ScriptRun) -> list[dict]:
    """Run (or reuse) every record of ``points`` × methods × seeds and return them in that
    order, each a copy with ``"point"`` (the label) and ``"point_overrides"`` added.

    Keys the user set on the command line win over a point's fixed overrides, so every key
    stays overridable; setting a key the points sweep (different values per point) is an
    error. A point whose methods are all deselected is skipped. Every point's configuration
    of every method (and its requests) is checked before the first request of any.

    :param points: the sweep.
    :param run: the parsed invocation (configuration, seeds, device, ``--out``).
    """
    labels = [p.label for p in points]
    if len(set(labels)) != len(labels):
        raise ValueError(f"grid point labels must be distinct, got {labels}")
    swept = {key for point in points for key in point.overrides
             if len({repr(p.overrides.get(key)) for p in points}) > 1}
    clashes = sorted(k for k in run.explicit for key in swept
                     if k == key or (k.startswith("methods.") and k.split(".", 2)[-1] == key))
    if clashes:
        raise ValueError(f"the command line sets {clashes}, which this script sweeps "
                         f"({sorted(swept)} over the points {labels}); drop the setting or use "
                         "the script's sweep flag")
    planned = []
    for point in points:        # every point checked before the first request of any
        methods = run.pick(point.methods) if point.methods is not None else run.methods
        if not methods:
            continue
        overrides = [(k, v) for k, v in point.overrides.items() if k not in run.explicit]
        requests = point.requests if point.requests is not None else run.requests
        try:
            specs = plan(methods, run.seeds, run.config, overrides=overrides,
                         requests=requests)
        except ValueError as err:
            raise ValueError(f"{point.label}: {err}") from None
        planned.append((point, specs))
    if not planned:
        raise ValueError(f"no run selected: methods {run.methods} match no grid point's "
                         "methods")
    options = run_options(run.args)
    group = default_group(run.config)   # one W&B group for the script: every point and table
    if options["wandb"] is not None and options["wandb"].group is None:
        options["wandb"] = replace(options["wandb"], group=group)
    from pall_avalanche.runs.batch import run_specs  # torch: only once something runs

    # one batch of runs for the whole grid (one pool of workers with --jobs), each run once;
    # a diverged run is left out (named in run.left_out), the others go on
    unique = list(dict.fromkeys(spec for _, specs in planned for spec in specs))
    computed = {(r["method"], r["seed"], r["config_hash"]): r
                for r in run_specs(unique, run.args.out, group=group, stats=run.stats,
                                   skip_diverged=True, left_out=run.left_out, **options)}
    if not computed:
        raise RuntimeError("every run diverged, no record to report: "
                           + "; ".join(run.left_out))
    return [{**computed[key], "point": point.label, "point_overrides": dict(point.overrides)}
            for point, specs in planned for spec in specs
            if (key := (spec.method, spec.seed, spec.hash)) in computed]


def left_out_notes(run: ScriptRun) -> list[str]:
    """The preamble's line naming the runs that diverged and have no record (none if
    none)."""
    if not run.left_out:
        return []
    return [f"Left out: {len(run.left_out)} run(s) diverged and have no record, so their rows "
            f"count fewer seeds: {'; '.join(run.left_out)}"]


def finish(run: ScriptRun, records: Sequence[dict]) -> None:
    """The end of a script: its closing summary on stderr.

    :raises RunsLeftOut: runs diverged (the report is written without them; exit code 3).
    """
    print(closing_summary(run.stats, records), file=sys.stderr)
    if run.left_out:
        raise RunsLeftOut(f"{len(run.left_out)} run(s) diverged and are left out of the report "
                          "(no record; a rerun tries them again): "
                          + "; ".join(run.left_out[:3]) + (" …" if len(run.left_out) > 3
                                                           else ""))


def closing_summary(stats: Mapping[str, int], records: Sequence[dict]) -> str:
    """One line for the end of a script: how many records were run and reused, the best mean
    A_l, where the exact methods' A_u sits against chance and how many records failed a
    learning check (:func:`~pall_avalanche.reports.record_failed_learning`; named only when
    some did).
    """
    parts = [f"ran {stats.get('ran', 0)}, reused {stats.get('reused', 0)} records"]
    settings: dict[str, set] = {}
    for record in records:
        settings.setdefault(record["method"], set()).add(record.get("point"))
    groups: dict[str, list[dict]] = {}
    for record in records:
        method, setting = record["method"], record.get("point")
        label = method_label(method)
        if len(settings[method]) > 1:       # name the setting only where a method has several
            label = f"{label} ({setting})"
        groups.setdefault(label, []).append(record)
    a_l = {name: [r["metrics"]["A_l"] for r in rs if r["metrics"]["A_l"] is not None]
           for name, rs in groups.items()}
    a_l = {name: sum(v) / len(v) for name, v in a_l.items() if v}
    if a_l:
        best = max(a_l, key=a_l.get)
        parts.append(f"best A_l {a_l[best]:.2f} ({best})")
    exact = [r for r in records if r.get("exact") and r["metrics"]["A_u"] is not None]
    if exact:
        chance = 100.0 / exact[0]["split"]["classes_per_task"]
        values = [r["metrics"]["A_u"] for r in exact]
        parts.append(f"exact methods' A_u {sum(values) / len(values):.1f} % on average vs "
                     f"chance {chance:.1f} %")
    failed = sum(record_failed_learning(r) for r in records)
    if failed:
        parts.append(f"{failed} of {len(records)} records left a task at chance right after "
                     f"learning it ({FAILED_MARK} in the table; see learning_checks)")
    return "; ".join(parts)


def finish_report(run: ScriptRun, records: Sequence[dict], *, name: str, title: str,
                  numbers: pd.DataFrame, cells: pd.DataFrame, notes: Sequence[str] = (),
                  figures: Mapping[str, Callable[[str], object]] | None = None) -> str:
    """Write ``<report-dir>/<name>_<benchmark>.{md,csv,tex}`` (and each figure as
    ``<stem><suffix>.png`` via ``figures[suffix](path)``) with the provenance preamble;
    print and return the Markdown.

    :param run: the invocation (report folder, command).
    :param records: the records behind the table (scale, seeds, hardware come from them).
    :param name: the script's name.
    :param title: the report's title (names the paper's table or figure).
    :param numbers: the unformatted frame (the CSV).
    :param cells: the formatted table.
    :param notes: lines for the preamble (scaling decisions, what the paper uses).
    :param figures: file-name suffix → function writing the figure to a path.
    :raises RunsLeftOut: after writing and printing the report, when runs diverged
        (:func:`finish`).
    """
    stem = Path(run.args.report_dir) / f"{name}_{run.config['benchmark']}"
    figure_paths = {suffix: f"{stem}{suffix}.png" for suffix in figures or {}}
    notes = [*notes, f"Records: `{run.args.out}`", *left_out_notes(run)]
    if figure_paths:
        notes.append(f"Figures: {', '.join(Path(p).name for p in figure_paths.values())}")
    preamble = provenance(records, title=title, command=run.command, notes=notes,
                          changed=run.explicit)
    markdown = write_report(stem, preamble=preamble, numbers=numbers, cells=cells,
                            caption=title)
    for suffix, path in figure_paths.items():     # after the report: it may keep earlier ones
        figures[suffix](path)
    log_table(WandbSettings.from_args(run.args), stem.name, numbers, config=run.config,
              markdown=markdown, group=default_group(run.config))
    print(markdown)
    finish(run, records)
    return markdown
