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
from pall_avalanche.strategies import ABLATION_METHODS, METHODS, TABLE1_METHODS
from pall_avalanche.wandb_logging import WandbSettings, add_wandb_arguments

__all__ = ["add_run_arguments", "config_from_args", "main_guard", "parse_methods", "run_options"]

# Dedicated flags → configuration keys (sweep agents pass these).
FLAG_KEYS = {
    "n_unlearn": "n_unlearn",
    "epochs": "epochs",
    "data_root": "data_root",
    "train_per_task": "train_per_task",
    "alpha": "alpha",
    "n_retrain_iters": "n_retrain_iters",
    "buffer_size": "buffer_size",
    "beta": "beta",
}


def add_run_arguments(parser: argparse.ArgumentParser, *, default_out: str) -> None:
    parser.add_argument("--benchmark", default="digits",
                        help="benchmark; picks benchmarks/configs/<benchmark>.yaml "
                             "(default: digits, embedded, no download)")
    parser.add_argument("--config", type=Path,
                        help="configuration file (overrides the --benchmark choice of file)")
    parser.add_argument("--methods", default="all",
                        help="comma-separated methods and groups: 'all' (Table 1's methods), "
                             "'ablations' (er_retrain, static_sparse, dynamic_sparse); "
                             f"available methods: {', '.join(METHODS)} (default: all)")
    parser.add_argument("--seeds", type=int, nargs="+",
                        help="seeds to run (default: the configuration's 'seeds')")
    parser.add_argument("--n-unlearn", type=int, help="N_u, unlearning requests per sequence")
    parser.add_argument("--requests", type=Path,
                        help='JSON list of {"kind": "learn"|"unlearn", "task": t} replayed for '
                             "every seed instead of generated sequences")
    parser.add_argument("--epochs", type=int, help="epochs per learning request")
    parser.add_argument("--alpha", type=float,
                        help="α, per-layer connectivity of a task subnetwork (PALL, WSN)")
    parser.add_argument("--n-retrain-iters", type=int,
                        help="N_f, retraining iterations after an unlearning request (PALL and "
                             "the replay baselines)")
    parser.add_argument("--buffer-size", type=int,
                        help="total episodic memory, split over the tasks (PALL, ER, DER++, GEM)")
    parser.add_argument("--beta", type=float,
                        help="β, weight of the logit-MSE rehearsal term (PALL, DER++)")
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
    parser.add_argument("--jobs", type=_positive_int, default=1, metavar="N",
                        help="run the (method, seed) records in N parallel processes "
                             "(default 1; the records are the same)")
    parser.add_argument("--no-checkpoint", dest="checkpoints", action="store_false",
                        help="no per-request checkpoints (by default a killed run resumes "
                             "after its last finished request)")
    add_wandb_arguments(parser)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is invalid; give an integer >= 1")
    return value


def run_options(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of :func:`~pall_avalanche.runner.run_experiments` that the
    flags of :func:`add_run_arguments` set (``device``, ``show_progress``, ``jobs``,
    ``checkpoints``, ``wandb``): ``run_experiments(..., **run_options(args))``.

    :param args: the parsed arguments.
    """
    return {"device": args.device, "show_progress": not args.quiet, "jobs": args.jobs,
            "checkpoints": args.checkpoints, "wandb": WandbSettings.from_args(args)}


METHOD_GROUPS = {"all": TABLE1_METHODS, "ablations": ABLATION_METHODS}


def parse_methods(text: str) -> list[str]:
    """A comma-separated list of registered method names and groups (``all``: Table 1's
    methods; ``ablations``: ER (Retraining) and the sparse subnetworks), without repeats."""
    methods: list[str] = []
    names = [m.strip() for m in text.split(",") if m.strip()]
    for name in names:
        methods += [m for m in METHOD_GROUPS.get(name, (name,)) if m not in methods]
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise ValueError(
            f"unknown method(s) {unknown or [text]}; valid methods are {', '.join(METHODS)} "
            f"or the groups {', '.join(METHOD_GROUPS)}"
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
    requests = None
    if args.requests is not None:
        requests = RequestSequence.load(args.requests, config["n_tasks"])
        # The replayed sequence decides N_u (records and reports group by it).
        config["n_unlearn"] = len(requests.unlearned_tasks)
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
