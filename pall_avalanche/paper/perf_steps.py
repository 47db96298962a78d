"""What one training step and one unlearning step cost as tasks accumulate: aten operations
and CPU time per step of every method at T = 5, 10 and 20, against a plain step.

    python benchmarks/perf_steps.py                        # every method, T = 5, 10, 20
    python benchmarks/perf_steps.py --baseline e43a453 --report-dir reports  # beside a commit
    python benchmarks/perf_steps.py --methods pall derpp --tasks 20

The set-up of each T: the embedded digits images as 2T classes (digit d of copy k, its images
rolled by k pixels, is class d + 10k), T tasks of two classes, the digits configuration
(MLP, batch 32, buffer 100 split over T) at learning rate 0.01 for every method (a step's
cost does not depend on it; at T = 20 LSF diverges at the configuration's 0.05); every method
learns tasks 0 .. T−1, one epoch of ``--train-per-task`` samples each, then unlearns task 0
(a method whose loss diverges gets "diverged" in the cells it did not reach). Measured, with
one torch thread:

- a **learning step** (one training iteration as Avalanche runs it: forward, the method's
  losses and penalties, backward, its gradient hooks, the optimizer step) of task T−1, with
  T−1 tasks learned: aten operations (all ``aten::`` events torch's profiler records, nested
  ones included: on a GPU, roughly the kernels launched) and the median CPU time
  (``time.process_time``, steps outside the profiler), beside Sequential's learning step;
- an **unlearning step** (one step of the loop an unlearning request runs, from the fresh
  optimizer's ``zero_grad`` to its ``step``: PALL's retraining iteration, a replay method's
  fine-tuning step, ...) with T−1 remaining tasks, beside a **plain step**: one SGD step
  (forward, cross-entropy, backward, the configuration's optimizer step) of the same model on
  one mini-batch.

The target (the last line): PALL's retraining iteration at T = 20 costs at most 5× a plain step
in aten operations. Operation counts do not depend on the machine's load; times do (one
thread, process time: run it on a quiet machine and read the ratios, measured side by side).

``--baseline REF`` measures another commit too, in the same invocation: REF is checked out
into a temporary git worktree, this measurement's own code (this file and its step meter)
is copied beside it, and it runs in a fresh interpreter with that code first on
``PYTHONPATH`` (REF's methods, its own plain step with REF's optimizer); every cell then shows
this code's figure and REF's after it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from pall_avalanche.cli import Parser
from pall_avalanche.exit_codes import main_guard
from pall_avalanche.paper.step_meter import (
    TIMED_STEPS,
    StepMeter,
    iteration_probes,
    probe_loop_steps,
)

__all__ = ["TARGET", "cli", "main", "measure"]

#: The most aten operations PALL's retraining iteration at T = 20 may cost, in plain steps.
TARGET = 5.0
DEFAULT_TASKS = (5, 10, 20)


def main(argv=None) -> str:
    from pall_avalanche.catalog import METHOD_INFO

    parser = Parser(prog="perf_steps.py", description=__doc__.split("\n\n")[0],
                    epilog=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", nargs="+",
                        help="methods to measure (default: every built-in method)")
    parser.add_argument("--tasks", type=int, nargs="+", default=list(DEFAULT_TASKS),
                        help="values of T (default: 5 10 20; each a multiple of 5)")
    parser.add_argument("--train-per-task", type=int, default=128,
                        help="training samples of every task (default: 128, 4 steps)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--report-dir", type=Path,
                        help="also write perf_steps.md there")
    parser.add_argument("--baseline", metavar="REF",
                        help="also measure this git commit, side by side (checked out into a "
                             "temporary worktree)")
    parser.add_argument("--json", type=Path, help="write the measured rows as JSON")
    args = parser.parse_args(argv)
    built_in = [m for m, info in METHOD_INFO.items() if info.where.startswith(
        "pall_avalanche.") and not info.where.startswith("pall_avalanche.audit.")]
    methods = args.methods or built_in
    unknown = [m for m in methods if m not in METHOD_INFO]
    if unknown:
        raise ValueError(f"--methods {' '.join(unknown)}: unknown; valid: {', '.join(built_in)}")
    bad = [t for t in args.tasks if t < 5 or t % 5]
    if bad:
        raise ValueError(f"--tasks {' '.join(map(str, bad))}: each T must be a multiple of 5 "
                         "(digits' 10 classes in copies, two classes a task)")
    if args.train_per_task < 32 or args.threads < 1:
        raise ValueError(f"--train-per-task={args.train_per_task} must be >= 32 (one "
                         f"mini-batch) and --threads={args.threads} >= 1")
    baseline = (_measure_commit(args.baseline, methods, args) if args.baseline is not None
                else None)
    rows = measure(methods, args.tasks, train_per_task=args.train_per_task,
                   threads=args.threads)
    if args.json is not None:
        args.json.write_text(json.dumps(rows))
    text = render(rows, args, baseline)
    print(text)
    if args.report_dir is not None:
        args.report_dir.mkdir(parents=True, exist_ok=True)
        (args.report_dir / "perf_steps.md").write_text(text + "\n")
    return text


def _measure_commit(ref: str, methods: list[str], args: argparse.Namespace) -> list[dict]:
    """The rows of :func:`measure` for the code of commit ``ref`` (a temporary worktree on
    ``PYTHONPATH``, this file run as a script in a fresh interpreter)."""
    root = Path(__file__).resolve().parents[2]
    with tempfile.TemporaryDirectory(prefix="perf_steps_") as scratch:
        tree, script, out = Path(scratch) / "tree", Path(scratch) / "measure.py", \
            Path(scratch) / "rows.json"
        added = subprocess.run(["git", "worktree", "add", "--detach", str(tree), ref],
                               cwd=root, capture_output=True, text=True)
        if added.returncode:
            raise ValueError(f"--baseline {ref}: not a commit of this repository "
                             f"({added.stderr.strip().splitlines()[-1]})")
        try:
            # this measurement's code, the step meter included, over the commit's package
            shutil.copy(__file__, script)
            shutil.copy(Path(__file__).with_name("step_meter.py"),
                        tree / "pall_avalanche" / "paper" / "step_meter.py")
            done = subprocess.run(
                [sys.executable, str(script), "--methods", *methods, "--tasks",
                 *map(str, args.tasks), "--train-per-task", str(args.train_per_task),
                 "--threads", str(args.threads), "--json", str(out)],
                cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True,
                text=True)
            if done.returncode:
                raise RuntimeError(f"measuring {ref} failed: "
                                   f"{done.stderr.strip().splitlines()[-1]}")
            return json.loads(out.read_text())
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=root,
                           capture_output=True)


def benchmark_with(n_tasks: int, *, seed: int, train_per_task: int):
    """Digits as ``2 · n_tasks`` classes (copies of its ten, copy k rolled by k pixels),
    ``n_tasks`` tasks of two."""
    import torch

    from pall_avalanche.data import build_benchmark, task_incremental_benchmark_from_tensors

    digits = build_benchmark("digits", seed=seed)
    order, per_task = digits.split.class_order, digits.split.classes_per_task
    copies = 2 * n_tasks // 10
    data = []
    for stream in (digits.train_stream, digits.test_stream):
        xs, ys = [], []
        for exp in stream:
            tensors = exp.dataset.eval()
            xs.append(torch.stack([tensors[i][0] for i in range(len(tensors))]))
            ys.append(torch.tensor([order[exp.task_label * per_task + int(t)]
                                    for t in tensors.targets]))
        x, y = torch.cat(xs), torch.cat(ys)
        # copy k rolled by k pixels: a task may hold digit d and its copy, told apart
        data.append((torch.cat([x.roll(k, dims=-1) for k in range(copies)]),
                     torch.cat([y + 10 * k for k in range(copies)])))
    return task_incremental_benchmark_from_tensors(
        "digits", data[0], data[1], n_tasks=n_tasks, seed=seed, train_per_task=train_per_task)


def measure(methods, tasks, *, train_per_task: int, threads: int) -> list[dict]:
    """One row per (T, method): its learning and unlearning steps, and the references."""
    import torch

    from pall_avalanche.config import for_benchmark, resolve_method_config
    from pall_avalanche.core import DivergedError
    from pall_avalanche.requests import RequestSequence
    from pall_avalanche.requests.streams import RequestStream
    from pall_avalanche.runs.build import build_run

    torch.set_num_threads(threads)
    base = for_benchmark("digits")
    rows = []
    for n_tasks in tasks:
        benchmark = benchmark_with(n_tasks, seed=0, train_per_task=train_per_task)
        requests = RequestSequence.parse(
            " ".join([*(f"L{t}" for t in range(n_tasks)), "U0"]), n_tasks)
        plain = None
        for method in ["sequential", *[m for m in methods if m != "sequential"]]:
            config = {**resolve_method_config(base, method), "n_tasks": n_tasks, "epochs": 1,
                      "lr": 0.01}
            learning, unlearning = StepMeter(), StepMeter()
            start, stop = iteration_probes(learning, n_tasks - 1)
            strategy = build_run(method, config, seed=0, benchmark=benchmark,
                                 plugins=[stop], measured=False).strategy
            strategy.plugins.insert(0, start)
            probe_loop_steps(strategy, unlearning)
            stream = RequestStream(benchmark, requests)
            try:
                for experience in stream[:n_tasks]:
                    strategy.train(experience)
                unlearning.ops, unlearning.times = None, []       # the unlearning request's
                strategy.train(stream[n_tasks])
            except DivergedError:
                learning.diverged = unlearning.diverged = True
            if plain is None:
                plain = _plain_step(strategy, benchmark, config)
            rows.append({"T": n_tasks, "method": method, "learning": learning.summary(),
                         "unlearning": unlearning.summary(), "plain": plain})
    by_key = {(r["T"], r["method"]): r for r in rows}
    for row in rows:
        row["sequential"] = by_key[(row["T"], "sequential")]["learning"]
    return [r for r in rows if r["method"] in methods]


def _plain_step(strategy, benchmark, config) -> tuple[int, float]:
    """One SGD step of a fresh copy of the model's architecture: (operations, median s)."""
    import copy

    import torch
    from torch.nn import functional as F

    from pall_avalanche.models import build_model
    from pall_avalanche.strategies import make_optimizer

    split = benchmark.split
    model = build_model(config["model"], input_shape=split.input_shape, n_tasks=split.n_tasks,
                        classes_per_task=split.classes_per_task)
    optimizer = make_optimizer(config, model.parameters())
    data = copy.copy(benchmark.train_stream[0].dataset).eval()
    x = torch.stack([data[i][0] for i in range(config["batch_size"])])
    y = torch.tensor([int(data.targets[i]) for i in range(config["batch_size"])])
    steps = StepMeter()
    for _ in range(TIMED_STEPS + 2):
        steps.start()
        optimizer.zero_grad()
        F.cross_entropy(model(x, 0), y).backward()
        optimizer.step()
        steps.stop()
    return steps.summary()


def _cell(value, reference) -> str:
    if value is None or isinstance(value, str):
        return value or "—"
    return f"{value:,}" if reference is None else f"{value:,} ({value / reference:.1f}×)"


def _ms(pair, reference) -> str:
    if pair[1] is None or isinstance(pair[1], str):
        return pair[1] or "—"
    return f"{1e3 * pair[1]:.2f} ({pair[1] / reference[1]:.1f}×)"


def render(rows: list[dict], args: argparse.Namespace,
           baseline: list[dict] | None = None) -> str:
    """The report: one table of operations, one of CPU times (each cell this code's figure
    and, with a baseline, the baseline's after it), and the target line."""
    import platform

    import torch

    before = {(r["T"], r["method"]): r for r in baseline or []}
    command = (f"python benchmarks/perf_steps.py --tasks {' '.join(map(str, args.tasks))} "
               f"--train-per-task {args.train_per_task} --threads {args.threads}"
               + (f" --baseline {args.baseline}" if args.baseline else "")
               + (f" --report-dir {args.report_dir}" if args.report_dir else ""))
    lines = ["# What a step costs as tasks accumulate", "",
             f"Command: `{command}`; digits MLP, T tasks of two classes (docstring of "
             f"`pall_avalanche.paper.perf_steps`); torch {torch.__version__}, "
             f"{platform.processor() or platform.machine()}, {args.threads} thread(s).", "",
             "## aten operations per step", "",
             "Learning step: a training iteration of the last task, T−1 tasks learned, "
             "(× Sequential's). Unlearning step: one step of the unlearning request's loop, "
             "T−1 remaining tasks (× a plain SGD step of the same model and mini-batch)."
             + (f" Each cell: this code; after `·`, commit {args.baseline}." if baseline
                else ""), "",
             "| Method | T | learning step | unlearning step | plain step |",
             "|---|---|---|---|---|"]

    def cells(row, figure, index):
        old = before.get((row["T"], row["method"]))
        out = []
        for kind, reference in (("learning", "sequential"), ("unlearning", "plain"),
                                ("plain", None)):
            now = figure(row[kind], row[reference] if reference else None, index)
            if old is not None:
                now += " · " + figure(old[kind], old[reference] if reference else None, index)
            out.append(now)
        return " | ".join(out)

    def ops(pair, reference, _):
        return _cell(pair[0], None if reference is None else reference[0])

    def ms(pair, reference, _):
        if reference is None:
            return f"{1e3 * pair[1]:.2f}"
        return _ms(pair, reference)

    lines += [f"| {row['method']} | {row['T']} | {cells(row, ops, 0)} |" for row in rows]
    lines += ["", "## CPU time per step (ms, median)", "",
              "| Method | T | learning step | unlearning step | plain step |",
              "|---|---|---|---|---|"]
    lines += [f"| {row['method']} | {row['T']} | {cells(row, ms, 1)} |" for row in rows]
    pall = [r for r in rows if r["method"] == "pall" and r["T"] == 20]
    if pall and isinstance(pall[0]["unlearning"][0], int):
        ratio = pall[0]["unlearning"][0] / pall[0]["plain"][0]
        verdict = "meets" if ratio <= TARGET else "misses"
        lines += ["", f"PALL's retraining iteration at T = 20: {ratio:.1f}× a plain step in "
                      f"aten operations ({verdict} the target of at most {TARGET:g}×)."]
    return "\n".join(lines)


def cli(argv=None) -> None:
    main_guard(main, argv, prog=Path(__file__).name)


if __name__ == "__main__":
    cli()
