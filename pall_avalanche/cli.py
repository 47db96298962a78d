"""Command-line plumbing shared by the scripts in ``benchmarks/``.

Every script takes ``--benchmark`` / ``--config`` (a YAML file from ``benchmarks/configs``),
``--set KEY=VALUE`` overrides of any configuration key, dedicated flags for the keys that
sweeps vary, and fails on bad input with one line naming the bad value.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from pall_avalanche.config import apply_overrides, load_config, parse_override
from pall_avalanche.requests import InvalidRequestSequence, RequestSequence
from pall_avalanche.strategies import METHODS

__all__ = ["add_run_arguments", "config_from_args", "main_guard", "parse_methods"]

# Dedicated flags → configuration keys (sweep agents pass these).
FLAG_KEYS = {
    "n_unlearn": "n_unlearn",
    "epochs": "epochs",
    "data_root": "data_root",
    "train_per_task": "train_per_task",
    "alpha": "alpha",
}


def add_run_arguments(parser: argparse.ArgumentParser, *, default_out: str) -> None:
    parser.add_argument("--benchmark", default="digits",
                        help="benchmark; picks benchmarks/configs/<benchmark>.yaml "
                             "(default: digits, embedded, no download)")
    parser.add_argument("--config", type=Path,
                        help="configuration file (overrides the --benchmark choice of file)")
    parser.add_argument("--methods", default="all",
                        help=f"comma-separated methods or 'all' (available: {', '.join(METHODS)})")
    parser.add_argument("--seeds", type=int, nargs="+",
                        help="seeds to run (default: the configuration's 'seeds')")
    parser.add_argument("--n-unlearn", type=int, help="N_u, unlearning requests per sequence")
    parser.add_argument("--requests", type=Path,
                        help='JSON list of {"kind": "learn"|"unlearn", "task": t} replayed for '
                             "every seed instead of generated sequences")
    parser.add_argument("--epochs", type=int, help="epochs per learning request")
    parser.add_argument("--alpha", type=float,
                        help="α, per-layer connectivity of a task subnetwork (PALL, WSN)")
    parser.add_argument("--data-root", help="folder of the dataset files (default ./data)")
    parser.add_argument("--train-per-task", type=int,
                        help="subsample each task's training set (reduced CPU runs)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE",
                        help="override any configuration key (dotted for nested: "
                             "methods.er.lr=0.001); repeatable")
    parser.add_argument("--out", type=Path, default=Path(default_out),
                        help=f"folder of the per-run records (default {default_out}); "
                             "finished records are reused")
    parser.add_argument("--report-dir", type=Path, default=Path("reports"),
                        help="folder of the CSV/Markdown tables (default reports)")
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def parse_methods(text: str) -> list[str]:
    """``"all"`` or a comma-separated list of registered method names."""
    if text.strip() == "all":
        return list(METHODS)
    methods = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise ValueError(
            f"unknown method(s) {unknown or [text]}; valid methods are {', '.join(METHODS)} "
            "or 'all'"
        )
    return methods


def config_from_args(args: argparse.Namespace, config_dir: Path
                     ) -> tuple[dict[str, Any], list[int], RequestSequence | None]:
    """The configuration (file + flags + ``--set``), the seeds and any replayed requests."""
    path = args.config or config_dir / f"{args.benchmark}.yaml"
    if args.config is None and not path.is_file():
        available = sorted(p.stem for p in config_dir.glob("*.yaml"))
        raise ValueError(f"no configuration for benchmark {args.benchmark!r}; "
                         f"available: {', '.join(available)}")
    config = load_config(path)
    overrides = [(key, getattr(args, flag)) for flag, key in FLAG_KEYS.items()
                 if getattr(args, flag, None) is not None]
    overrides += [parse_override(text) for text in args.overrides]
    config = apply_overrides(config, overrides)
    seeds = list(args.seeds) if args.seeds is not None else list(config.get("seeds", [0]))
    requests = (RequestSequence.load(args.requests, config["n_tasks"])
                if args.requests is not None else None)
    return config, seeds, requests


def main_guard(main: Callable[[Sequence[str] | None], Any], argv: Sequence[str] | None = None,
               *, prog: str) -> NoReturn:
    """Run ``main``; bad input ends the program with one line on stderr (``prog: error:
    ...``) and exit code 2."""
    try:
        main(argv)
    except (ValueError, FileNotFoundError, InvalidRequestSequence) as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        sys.exit(2)
    sys.exit(0)
