"""Sweeps without a W&B server: expand a W&B sweep file into its grid of commands.

``python -m pall_avalanche.sweeps benchmarks/sweeps/table1_alpha.yaml`` prints one command
per grid point (the same commands ``wandb agent`` would run: the file's ``command`` list with
``${args}`` as ``--key=value`` per parameter, in W&B's grid order), so a lab without W&B, or
with W&B offline, runs the same grid:

- ``--no-wandb`` drops the ``--wandb`` flag from every command;
- ``--run [--jobs N]`` runs them here, N at a time (their records share ``--out``: the
  per-record locks split the work, reruns reuse finished records); a command training on
  ``cuda`` (no index) gets one GPU of its own, as the runner's ``--jobs`` workers do: job slot
  k of N runs with ``CUDA_VISIBLE_DEVICES`` set to the k-th visible GPU (round-robin when N
  exceeds them; the visible GPUs are those of ``CUDA_VISIBLE_DEVICES`` when it is set, else
  every GPU torch sees), so it sees that GPU alone, as ``cuda``;
- ``--slurm FILE`` writes a Slurm array script, one array task per command.

Only ``method: grid`` sweeps are expanded (a random or Bayesian sweep has no fixed grid).
"""

from __future__ import annotations

import argparse
import itertools
import os
import queue
import shlex
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pall_avalanche.cli import Parser
from pall_avalanche.config import load_yaml_file
from pall_avalanche.exit_codes import main_guard
from pall_avalanche.files import write_text_atomic

__all__ = ["expand_sweep", "job_environment", "main", "slurm_script", "visible_gpus"]

#: The macros of a W&B sweep's ``command`` list that this expansion fills in.
_MACROS = {"${env}", "${interpreter}", "${program}", "${args}", "${args_no_hyphens}"}


def expand_sweep(path: str | Path, *, wandb: bool = True) -> list[list[str]]:
    """The commands of every point of the grid sweep in ``path``, in W&B's grid order (the
    last parameter varies fastest).

    :param path: a W&B sweep YAML file with ``program``, ``method: grid``, ``parameters``
        (each ``value`` or ``values``) and optionally ``command``.
    :param wandb: keep the ``--wandb`` flag of the file's command.
    :raises FileNotFoundError: there is no such file.
    :raises ValueError: one line naming the file and what is wrong: not a readable YAML
        mapping (:func:`~pall_avalanche.config.load_yaml_file`'s bounds), not a grid sweep, no
        ``program`` string, no parameters, a parameter without ``value`` or with ``values``
        that is not a non-empty list of scalars, a ``command`` that is not a list of strings.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"sweep file {path} does not exist")
    spec = load_yaml_file(path, str(path))
    if not isinstance(spec, dict):
        raise ValueError(f"{path}: a sweep file is a YAML mapping, got {type(spec).__name__}")
    if spec.get("method") != "grid":
        raise ValueError(f"{path}: only grid sweeps (method: grid) have a grid of commands, "
                         f"got method {spec.get('method')!r}")
    if not isinstance(spec.get("program"), str) or not spec["program"].strip():
        raise ValueError(f"{path}: 'program' must name the script, e.g. benchmarks/table1.py; "
                         f"got {spec.get('program')!r}")
    parameters = spec.get("parameters")
    if not isinstance(parameters, dict) or not parameters:
        raise ValueError(f"{path}: 'parameters' must map each parameter to its value or "
                         f"values; got {parameters!r}")
    names, choices = [], []
    for name, setting in parameters.items():
        if not isinstance(setting, dict) or not ({"value", "values"} & set(setting)):
            raise ValueError(f"{path}: parameter {name!r} needs 'value' or 'values'")
        values = setting["values"] if "values" in setting else [setting["value"]]
        if not isinstance(values, list) or not values or not all(
                isinstance(v, (str, int, float, bool)) or v is None for v in values):
            raise ValueError(f"{path}: parameter {name!r}: 'values' must be a non-empty list "
                             f"of numbers or strings; got {values!r}")
        names.append(name)
        choices.append(values)
    template = spec.get("command", ["${env}", "${interpreter}", "${program}", "${args}"])
    if not isinstance(template, list) or not all(isinstance(p, str) for p in template):
        raise ValueError(f"{path}: 'command' must be a list of strings (W&B's form, e.g. "
                         f"[${{env}}, ${{interpreter}}, ${{program}}, ${{args}}]); got "
                         f"{template!r}")
    fixed = [part for part in template if part not in _MACROS
             and (wandb or part != "--wandb")]
    commands = []
    for point in itertools.product(*choices):
        args = [f"--{name}={value}" for name, value in zip(names, point, strict=True)]
        commands.append(["python", spec["program"], *fixed, *args])
    return commands


def slurm_script(commands: Sequence[Sequence[str]], *, sweep: str) -> str:
    """A Slurm array script running ``commands[$SLURM_ARRAY_TASK_ID]`` (one GPU each)."""
    lines = ["#!/bin/bash", f"# {len(commands)} commands of {sweep} "
             "(python -m pall_avalanche.sweeps --slurm)",
             f"#SBATCH --array=0-{len(commands) - 1}", "#SBATCH --gres=gpu:1",
             "#SBATCH --job-name=pall-sweep", "set -euo pipefail",
             'cd "$SLURM_SUBMIT_DIR"   # submit from the repository root', "commands=("]
    lines += [f"  {shlex.quote(shlex.join(command))}" for command in commands]
    lines += [")", 'eval "${commands[$SLURM_ARRAY_TASK_ID]}"']
    return "\n".join(lines) + "\n"


def trains_on_gpu(command: Sequence[str]) -> bool:
    """Whether ``command`` trains on ``cuda`` with no device index (``--device=cuda`` or
    ``--device cuda``): the commands a job slot gives a GPU of their own."""
    for i, part in enumerate(command):
        value = (part.partition("=")[2] if part.startswith("--device=")
                 else command[i + 1] if part == "--device" and i + 1 < len(command) else None)
        if value is not None:
            return value == "cuda"
    return False


def visible_gpus() -> list[str]:
    """The GPUs jobs are placed on: the entries of ``CUDA_VISIBLE_DEVICES`` when it is set
    (none when it is empty), else ``0 .. n−1`` for the n GPUs torch sees."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is not None:
        return [gpu.strip() for gpu in value.split(",") if gpu.strip()]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]


def job_environment(slot: int, gpus: Sequence[str], command: Sequence[str]) -> dict[str, str]:
    """What job slot ``slot`` adds to a command's environment: ``CUDA_VISIBLE_DEVICES`` set to
    ``gpus[slot mod len(gpus)]`` when the command trains on ``cuda`` (:func:`trains_on_gpu`)
    and a GPU is visible, so the command sees that one GPU, as ``cuda``; nothing otherwise."""
    if gpus and trains_on_gpu(command):
        return {"CUDA_VISIBLE_DEVICES": gpus[slot % len(gpus)]}
    return {}


def _run_all(commands: Sequence[Sequence[str]], jobs: int) -> int:
    """Run the commands, ``jobs`` at a time, each in a job slot of its own with that slot's
    GPU (:func:`job_environment`); the number that failed."""
    gpus = visible_gpus() if any(trains_on_gpu(c) for c in commands) else []
    slots: queue.Queue[int] = queue.Queue()
    for slot in range(jobs):
        slots.put(slot)

    def run(command: Sequence[str]) -> int:
        slot = slots.get()
        try:
            extra = job_environment(slot, gpus, command)
            code = subprocess.run([sys.executable, *command[1:]], check=False,
                                  env={**os.environ, **extra}).returncode
        finally:
            slots.put(slot)
        where = f" (GPU {extra['CUDA_VISIBLE_DEVICES']})" if extra else ""
        print(f"{'ok' if code == 0 else f'exit {code}'}{where}: {shlex.join(command)}",
              file=sys.stderr, flush=True)
        return code

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return sum(code != 0 for code in pool.map(run, commands))


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m pall_avalanche.sweeps SWEEP.yaml [--no-wandb] [--run [--jobs N] |
    --slurm FILE]``: print (default), run or write as a Slurm array the grid's commands."""
    parser = Parser(prog="python -m pall_avalanche.sweeps", description=__doc__.split("\n\n")[0],
                    epilog=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep", type=Path, help="a W&B grid sweep file (benchmarks/sweeps)")
    parser.add_argument("--no-wandb", dest="wandb", action="store_false",
                        help="drop --wandb from every command")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--run", action="store_true", help="run the commands here")
    action.add_argument("--slurm", type=Path, metavar="FILE",
                        help="write a Slurm array script to FILE")
    parser.add_argument("--jobs", type=int, default=1, help="commands at a time with --run")
    args = parser.parse_args(argv)
    if not args.sweep.is_file():
        raise FileNotFoundError(f"sweep file {args.sweep} does not exist")
    if args.jobs < 1:
        raise ValueError(f"--jobs {args.jobs}: give an integer >= 1")
    commands = expand_sweep(args.sweep, wandb=args.wandb)
    if args.slurm is not None:
        write_text_atomic(args.slurm, slurm_script(commands, sweep=str(args.sweep)))
        print(f"wrote {args.slurm}: {len(commands)} array tasks", file=sys.stderr)
    elif args.run:
        failed = _run_all(commands, args.jobs)
        if failed:
            raise RuntimeError(f"{failed} of {len(commands)} commands failed")
    else:
        print("\n".join(shlex.join(command) for command in commands))


def cli(argv: Sequence[str] | None = None) -> None:
    """The command: ``python -m pall_avalanche.sweeps``, installed as ``pall-sweeps``."""
    main_guard(main, argv, prog="python -m pall_avalanche.sweeps")


if __name__ == "__main__":
    cli()
