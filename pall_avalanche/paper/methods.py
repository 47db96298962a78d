"""Every registered method with what it costs: ``python benchmarks/methods.py`` (installed as
``pall-methods``; ``--plugin FILE`` adds a plugin's methods).

One row per method: its name for ``--methods``, its label in the tables, whether it unlearns
exactly, its inference model size (symbolic: ``d`` the dense network, ``M_i`` a task's mask,
``|Ω_i|`` the active tasks) and, from a committed timing report (Table A7, the repository's
``reports/table_timing_digits.csv`` by default), its seconds per learning epoch and per
unlearning request (learning also as a ratio to Sequential's in the same run). The timing report's
command, scale and hardware are printed above the table: the seconds are that machine's.
"""

from __future__ import annotations

import argparse
import csv
from collections.abc import Sequence
from pathlib import Path

from pall_avalanche.catalog import METHOD_INFO
from pall_avalanche.cli import Parser, parse_run_arguments
from pall_avalanche.exit_codes import main_guard

__all__ = ["DEFAULT_TIMING", "cli", "main", "method_rows"]

#: The committed timing report of a checkout (Table A7 on digits).
DEFAULT_TIMING = Path(__file__).resolve().parents[2] / "reports" / "table_timing_digits.csv"
_PREAMBLE = ("Command:", "Scale:", "Hardware:")


def _timing(path: Path | None) -> tuple[dict[str, dict], list[str]]:
    """The timing report's rows by method and its preamble's command, scale and hardware
    lines (nothing when ``path`` is ``None``)."""
    if path is None:
        return {}, []
    if not path.is_file():
        raise FileNotFoundError(f"--timing {path}: no such file; give a CSV that "
                                "benchmarks/table_timing.py wrote, or --no-timing")
    with open(path, newline="") as f:
        rows = {row["method"]: row for row in csv.DictReader(f)}
    needed = {"learn_s_mean", "learn_s_ratio", "unlearn_s_mean", "unlearn_s_ratio"}
    if rows and not needed <= set(next(iter(rows.values()))):
        raise ValueError(f"--timing {path}: not a timing report (its columns lack "
                         f"{sorted(needed)}); give a CSV that benchmarks/table_timing.py wrote")
    markdown = path.with_suffix(".md")
    notes = ([line.rstrip() for line in markdown.read_text().splitlines()
              if line.startswith(_PREAMBLE)] if markdown.is_file() else [])
    return rows, notes


def _seconds(row: dict | None, name: str, *, ratio: bool) -> str:
    if row is None or not row.get(f"{name}_mean"):
        return "—"
    seconds = f"{float(row[f'{name}_mean']):.4f}"
    return f"{seconds} (× {float(row[f'{name}_ratio']):.1f})" if ratio else seconds


def method_rows(timing: dict[str, dict]) -> list[list[str]]:
    """One row per registered method: name, label, exact, model size, seconds per learning
    epoch (with the ratio to Sequential's) and per unlearning request, where ``timing`` has
    the method (Sequential's unlearning does nothing: no ratio to it)."""
    return [[f"`{name}`", info.label, "yes" if info.exact else "no",
             info.size.replace("|", "\\|"),
             _seconds(timing.get(name), "learn_s", ratio=True),
             _seconds(timing.get(name), "unlearn_s", ratio=False)]
            for name, info in METHOD_INFO.items()]


def main(argv: Sequence[str] | None = None) -> str:
    parser = Parser(prog="methods", description=__doc__.split("\n\n")[0], epilog=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--plugin", dest="extensions", action="append", default=[],
                        metavar="MODULE_OR_FILE",
                        help="load an extension (a module or file registering methods) first "
                             "(repeatable)")
    timing = parser.add_mutually_exclusive_group()
    timing.add_argument("--timing", type=Path, default=None, metavar="CSV",
                        help="the timing report to read the seconds from (default: the "
                             "checkout's reports/table_timing_digits.csv, when there is one)")
    timing.add_argument("--no-timing", action="store_true",
                        help="list the methods without seconds")
    args = parse_run_arguments(parser, argv)
    path = None if args.no_timing else args.timing
    if path is None and not args.no_timing and DEFAULT_TIMING.is_file():
        path = DEFAULT_TIMING
    rows, notes = _timing(path)
    header = ["name", "label", "exact", "model size", "learning (s/epoch)", "unlearning (s)"]
    lines = ([f"Seconds: {path} (learning × Sequential's in the same run; — the report has "
              "no such method)", *notes, ""] if path
             else ["Seconds: no timing report (--timing CSV reads one)", ""])
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in method_rows(rows)]
    text = "\n".join(lines)
    print(text)
    return text


def cli(argv: Sequence[str] | None = None) -> None:
    """The installed command (``pall-methods``)."""
    main_guard(main, argv, prog="python benchmarks/methods.py")
