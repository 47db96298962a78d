"""Command-line plumbing shared by the paper scripts (:mod:`pall_avalanche.paper`). It imports
neither torch nor Avalanche.

Every script takes ``--benchmark`` / ``--config`` (a YAML file from
:data:`~pall_avalanche.config.CONFIG_DIR`), ``--set KEY=VALUE`` overrides of any configuration
key, dedicated flags for the keys that sweeps vary, and fails on bad input with one line naming
the option, the bad value and what is valid (exit code 2), before anything is trained: unknown
keys (with a close match), values of the wrong type or range (:mod:`pall_avalanche.config`), a
device this machine lacks, a results or report folder that cannot be written. Reports go beside
the records (``--out``) unless ``--report-dir`` names another folder, so no run replaces a
report it did not produce.
"""

from __future__ import annotations

import argparse
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from pall_avalanche.catalog import (
    ABLATION_METHODS,
    AUDIT_CONTROL,
    AUDIT_DENSE_LEAKS,
    AUDIT_LEAKS,
    AUDIT_PER_TASK_CONTROL,
    AUDIT_PER_TASK_LEAKS,
    FIELD_METHODS,
    METHOD_INFO,
    TABLE1_METHODS,
)
from pall_avalanche.config import (
    AUTO_MIN_RUNS,
    CONFIG_DIR,
    CPU_RUN_THREADS,
    MAX_SEED,
    apply_overrides,
    check_setting,
    for_benchmark,
    load_config,
    parse_override,
    with_defaults,
)
from pall_avalanche.exit_codes import program_name
from pall_avalanche.options import AMP_MODES, INPUT_PIPELINES
from pall_avalanche.requests import InvalidRequestSequence, RequestSequence
from pall_avalanche.runs.wandb_logging import WandbSettings, add_wandb_arguments

__all__ = ["RUN_FLAG_KEYS", "Parser", "add_run_arguments", "check_device", "config_from_args",
           "flag_keys", "folder_option", "method_flags", "parse_methods", "parse_run_arguments",
           "run_options", "seed_option"]

class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (``prog: error: ...``, exit code 2); its
    ``prog`` is the installed command's name when run as one (:func:`program_name`)."""

    def __init__(self, *args: Any, prog: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, prog=program_name(prog) if prog else None, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")

# Dedicated flags of run keys → configuration keys (sweep agents pass these).
RUN_FLAG_KEYS = {
    "n_unlearn": "n_unlearn",
    "epochs": "epochs",
    "data_root": "data_root",
    "train_per_task": "train_per_task",
    "amp": "amp",
    "channels_last": "channels_last",
    "tf32": "tf32",
    "deterministic": "deterministic",
    "input_pipeline": "input_pipeline",
    "compile": "compile",
}


def method_flags() -> dict[str, list]:
    """The method keys with a dedicated flag (declared with ``flag=True``), each with its
    declarations and the labels of the methods that declare it (variants left out), in the
    catalog's order."""
    out: dict[str, list] = {}
    for info in METHOD_INFO.values():
        for key, spec in info.keys.items():
            if spec.flag:
                entry = out.setdefault(key, [spec, []])
                if not info.settings:
                    entry[1].append(info.label)
    return out


def flag_keys() -> dict[str, str]:
    """Every dedicated flag (its ``argparse`` destination) → the configuration key it sets:
    the run keys' and the method keys' (:func:`method_flags`)."""
    return {**RUN_FLAG_KEYS, **{key: key for key in method_flags()}}


def add_run_arguments(parser: argparse.ArgumentParser, *, default_out: str) -> None:
    parser.add_argument("--plugin", dest="extensions", action="append", default=[],
                        metavar="MODULE_OR_FILE",
                        help="a module or .py file registering methods, benchmarks or models "
                             "(register_method, ...), loaded before anything is parsed, in "
                             "every --jobs worker too; repeatable")
    parser.add_argument("--benchmark", default="digits",
                        help="benchmark; picks pall_avalanche/configs/<benchmark>.yaml, or the "
                             "configuration an extension registered with it (default: digits, "
                             "embedded, no download)")
    parser.add_argument("--config", type=Path,
                        help="configuration file (instead of the --benchmark choice of file; "
                             "keys it leaves out, also within its methods: entries, come from "
                             "the configuration of the benchmark it names)")
    parser.add_argument("--methods", default="all",
                        help="comma-separated methods and groups: 'all' (Table 1's methods), "
                             "'ablations' (er_retrain, static_sparse, dynamic_sparse), 'field' "
                             "(the continual-unlearning field's methods beyond the paper), 'leaks' "
                             "(the audit's positive controls and leaky variants); "
                             f"available methods: {', '.join(METHOD_INFO)} (default: "
                             "%(default)s)")
    parser.add_argument("--seeds", type=seed_option, nargs="+",
                        help="seeds to run (default: the configuration's 'seeds')")
    parser.add_argument("--n-unlearn", type=int, help="N_u, unlearning requests per sequence")
    parser.add_argument("--requests", metavar="SEQUENCE",
                        help="a request sequence replayed for every seed instead of generated "
                             "ones: 'L0 L1 U0 P2 M1' (L learn, P learn permanently, U unlearn, "
                             "M make permanent; commas allowed, as UnCLe's 'L6,L7,U1'), CLPU's "
                             "notation after 'clpu:' ('clpu:R0 T1 T2 R1 F2'), or a JSON file of "
                             '[{"kind": "learn"|"unlearn"|"make_permanent", "task": t}, ...]')
    parser.add_argument("--epochs", type=int, help="epochs per learning request")
    for key, (spec, labels) in method_flags().items():
        parser.add_argument(f"--{key.replace('_', '-')}", type=spec.kind,
                            choices=spec.choices or None,
                            help=f"{spec.meaning} ({', '.join(labels)}; default "
                                 f"{spec.default})")
    parser.add_argument("--amp", choices=AMP_MODES,
                        help="bfloat16 autocast for the training forward passes (recorded in "
                             "the configuration as amp)")
    parser.add_argument("--channels-last", action="store_const", const=True,
                        help="channels-last memory layout (recorded as channels_last)")
    parser.add_argument("--no-tf32", dest="tf32", action="store_const", const=False,
                        help="full float32 matrix products and convolutions on a GPU (by "
                             "default TensorFloat-32 there; recorded as tf32)")
    parser.add_argument("--deterministic", action="store_const", const=True,
                        help="deterministic algorithms only, so a GPU run repeats bit for "
                             "bit; an operation without a deterministic kernel stops the run "
                             "with one line naming it (recorded as deterministic)")
    parser.add_argument("--compile", action="store_const", const=True,
                        help="torch.compile the backbone (a GPU speed option; the masked "
                             "forward compiles; recorded as compile)")
    parser.add_argument("--input-pipeline", choices=INPUT_PIPELINES,
                        help="where training mini-batches are assembled: batched, one uint8 "
                             "tensor per task on the training device, augmented as a batch "
                             "(the default where the benchmark offers it: CIFAR, Tiny "
                             "ImageNet), or per_sample, torchvision transforms on the host")
    parser.add_argument("--data-root", help="folder of the dataset files (default ./data)")
    parser.add_argument("--train-per-task", type=int,
                        help="subsample each task's training set (reduced CPU runs)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE",
                        help="override any configuration key (dotted for nested: "
                             "methods.er.lr=0.001); repeatable")
    parser.add_argument("--out", type=folder_option, default=Path(default_out),
                        help=f"folder of the per-run records (default {default_out}); "
                             "finished records are reused")
    parser.add_argument("--report-dir", type=folder_option,
                        help="folder of the CSV/Markdown/LaTeX report (default: the --out "
                             "folder, beside the records; the committed paper reports are "
                             "written with --report-dir reports)")
    parser.add_argument("--device", default="cpu",
                        help="torch device: cpu, cuda, cuda:N, ... (default cpu)")
    parser.add_argument("--quiet", action="store_true",
                        help="no progress bars and no per-request lines; one line per finished "
                             "run stays, with the time so far and the time left")
    parser.add_argument("--jobs", type=_jobs, default="auto", metavar="N",
                        help="run the (method, seed) records in N parallel processes; 'auto' "
                             f"(default): one per CPU core when at least {AUTO_MIN_RUNS} CPU "
                             "runs are missing, else 1 (the records are the same: a CPU run "
                             f"uses {CPU_RUN_THREADS} torch thread anywhere)")
    parser.add_argument("--no-checkpoint", dest="checkpoints", action="store_false",
                        help="no per-request checkpoints (by default a killed run resumes "
                             "after its last finished request)")
    add_wandb_arguments(parser)


def parse_run_arguments(parser: argparse.ArgumentParser, argv: Sequence[str] | None
                        ) -> argparse.Namespace:
    """Parse ``argv`` (flags of :func:`add_run_arguments`) and load the extensions
    (:func:`~pall_avalanche.extensions.load_extensions`: ``--plugin`` and the installed entry
    points) before anything names a method, benchmark or model."""
    from pall_avalanche.extensions import load_extensions

    args = parser.parse_args(argv)
    load_extensions(args.extensions)
    return args


def folder_option(text: str) -> Path:
    """A folder option's value: any path but an empty one (which would mean the current
    folder without saying so)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is empty; give a folder")
    return Path(text)


def _int_at_least(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if value < low:
        raise argparse.ArgumentTypeError(f"{text!r} is invalid; give an integer >= {low}")
    return value


def _jobs(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        return _int_at_least(text, 1)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"{text!r} is invalid; give an integer >= 1 or "
                                         "auto") from None


def seed_option(text: str) -> int:
    """A seed option's value: an integer from 0 to :data:`~pall_avalanche.config.MAX_SEED`."""
    value = _int_at_least(text, 0)
    if value > MAX_SEED:
        raise argparse.ArgumentTypeError(f"{text!r} is too large; give a seed from 0 to "
                                         f"{MAX_SEED}")
    return value


def check_device(text: str) -> None:
    """Refuse a ``--device`` that is not a torch device or that this machine lacks (torch is
    imported only for devices other than the CPU)."""
    if text == "cpu":
        return
    import torch

    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise ValueError(f"--device {text}: not a torch device; valid: cpu, cuda, cuda:N, mps, "
                         "xpu") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"--device {text}: CUDA is not available on this machine (torch "
                             f"{torch.__version__} finds no GPU); use --device cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"--device {text}: this machine has {torch.cuda.device_count()} "
                             f"CUDA device(s), cuda:0 .. cuda:{torch.cuda.device_count() - 1}")
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"--device {text}: MPS is not available on this machine")
    elif device.type == "xpu" and not (hasattr(torch, "xpu") and torch.xpu.is_available()):
        raise ValueError(f"--device {text}: XPU is not available on this machine")
    elif device.type not in ("cuda", "mps", "xpu"):
        raise ValueError(f"--device {text}: runs train on cpu, cuda, cuda:N, mps or xpu, not "
                         f"on {device.type}")


def check_writable(folder: Path, option: str) -> None:
    """Refuse ``folder`` unless it can be created and written (before anything is trained)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        raise ValueError(f"{option} {folder}: cannot write there ({err.strerror or err})"
                         ) from None


def run_options(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of :func:`~pall_avalanche.runs.run_experiments` that the
    flags of :func:`add_run_arguments` set (``device``, ``show_progress``, ``jobs``,
    ``checkpoints``, ``wandb``): ``run_experiments(..., **run_options(args))``.

    :param args: the parsed arguments.
    """
    return {"device": args.device, "show_progress": not args.quiet, "jobs": args.jobs,
            "checkpoints": args.checkpoints, "wandb": WandbSettings.from_args(args)}


#: A request sequence written out on the command line (``L0 L1 U0``, ``L6,L7,U1``).
_SEQUENCE = re.compile(r"[LPUM][0-9]+([\s,]+[LPUM][0-9]+)*")


def read_requests(value: str, n_tasks: int) -> RequestSequence:
    """The sequence ``--requests`` names: CLPU's notation after ``clpu:``
    (:meth:`RequestSequence.parse_clpu`), this project's string form
    (:meth:`RequestSequence.parse`), else a JSON file (:meth:`RequestSequence.load`).

    :raises FileNotFoundError: a file that does not exist.
    """
    text = value.strip()
    if text.startswith("clpu:"):
        return RequestSequence.parse_clpu(text[len("clpu:"):], n_tasks)
    if _SEQUENCE.fullmatch(text):
        return RequestSequence.parse(text, n_tasks)
    if not Path(value).is_file():
        raise FileNotFoundError(f"--requests {value}: no such file, and not a sequence such as "
                                "'L0 L1 U0' or 'clpu:R0 T1 F1'")
    return RequestSequence.load(value, n_tasks)


METHOD_GROUPS = {"all": TABLE1_METHODS, "ablations": ABLATION_METHODS, "field": FIELD_METHODS,
                 "leaks": (AUDIT_CONTROL, *AUDIT_LEAKS, AUDIT_PER_TASK_CONTROL,
                           *AUDIT_PER_TASK_LEAKS, *AUDIT_DENSE_LEAKS)}


def parse_methods(text: str) -> list[str]:
    """A comma-separated list of registered method names and groups (``all``: Table 1's
    methods; ``ablations``: ER (Retraining) and the sparse subnetworks; ``leaks``: the
    exactness audit's positive controls and leaky variants; ``field``: the
    continual-unlearning field's methods beyond the paper), without repeats."""
    methods: list[str] = []
    names = [m.strip() for m in text.split(",") if m.strip()]
    for name in names:
        methods += [m for m in METHOD_GROUPS.get(name, (name,)) if m not in methods]
    unknown = [m for m in methods if m not in METHOD_INFO]
    if unknown or not methods:
        raise ValueError(
            f"unknown method(s) {unknown or [text]}; valid methods are {', '.join(METHOD_INFO)} "
            f"or the groups {', '.join(METHOD_GROUPS)}"
        )
    return methods


def config_from_args(args: argparse.Namespace, config_dir: Path = CONFIG_DIR
                     ) -> tuple[dict[str, Any], list[int], RequestSequence | None]:
    """The configuration (file + flags + ``--set``, every value checked), the seeds and any
    replayed requests; also checks ``--device`` and that ``--out`` and ``--report-dir`` can be
    written (a missing ``--report-dir`` becomes ``--out``)."""
    if args.config is None:
        config = for_benchmark(args.benchmark, config_dir)
    else:
        config = with_defaults(load_config(args.config), args.benchmark, config_dir)
    overrides = []
    for flag, key in flag_keys().items():
        value = getattr(args, flag, None)
        if value is not None:
            check_setting(key, value, f"--{flag.replace('_', '-')} {value}")
            overrides.append((key, value))
    for text in args.overrides:
        key, value = parse_override(text)
        check_setting(key, value, f"--set {text}")
        overrides.append((key, value))
    config = apply_overrides(config, overrides)
    seeds = list(args.seeds) if args.seeds is not None else list(config.get("seeds", [0]))
    twice = sorted({s for s in seeds if seeds.count(s) > 1})
    if twice:
        raise ValueError(f"--seeds {' '.join(map(str, seeds))}: seed(s) {twice} given more "
                         "than once; give each seed once")
    check_device(args.device)
    if getattr(args, "report_dir", None) is None:
        if Path(args.out).name == "reports":
            raise ValueError(f"--out {args.out}: records go to a results folder, and reports "
                             "are written into a reports folder only with --report-dir (the "
                             "committed reports: --report-dir reports); give --out "
                             "results/NAME")
        args.report_dir = args.out
    check_writable(args.out, "--out")
    check_writable(args.report_dir, "--report-dir")
    requests = None
    if args.requests is not None:
        try:
            requests = read_requests(args.requests, config["n_tasks"])
        except InvalidRequestSequence as err:
            raise InvalidRequestSequence(f"--requests {err}") from None
        # The replayed sequence decides N_u (records and reports group by it).
        config["n_unlearn"] = len(requests.unlearned_tasks)
    return config, seeds, requests
