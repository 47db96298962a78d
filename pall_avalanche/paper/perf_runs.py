"""What a run costs besides the method: the default Table 1 from a clean results folder, one
audit shadow run, and a run broken down by phase, for this code and, side by side in the same
invocation, for another commit (``--baseline``).

    python benchmarks/perf_runs.py                           # this code only
    python benchmarks/perf_runs.py --baseline 48295e1 --report-dir reports

Every measurement runs in a fresh interpreter, one after another (run it on a quiet machine):

- **Table 1**: ``python benchmarks/table1.py`` with no argument but a fresh ``--out`` (its
  wall time, imports and report included; each code with its own default ``--jobs``);
- **audit shadow run**: ``--shadows`` shadow runs of PALL and of Sequential in the audit's
  setting (digits, 5 epochs per task, the audited sequence, each with its probe), in this
  process (``jobs=1``): seconds per run;
- **phases**: ``table1.py --seeds 0 --jobs 1`` under ``cProfile``; each run's time split into
  set-up, data loading, Avalanche's evaluator dispatch, the evaluation after each request,
  the learning checks, buffer filling, checkpoints, records and the rest: the method's
  training and unlearning steps with its own plugins. Phases are attributed by function
  (the profiler's cumulative times), so they add up to the runs' time.

The baseline is checked out into a temporary git worktree and run from there
(``PYTHONPATH``), with the packages installed here.
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from pall_avalanche.audit.protocol import AUDIT_REQUESTS
from pall_avalanche.cli import Parser
from pall_avalanche.exit_codes import main_guard

__all__ = ["PHASES", "cli", "main", "phase_seconds"]

ROOT = Path(__file__).resolve().parents[2]

#: The phases of a run, in report order (the method's steps are what is left).
PHASES = ("set-up (benchmark, model, strategy)", "data loading (training batches)",
          "evaluator dispatch (Avalanche's per-event calls)", "evaluation after each request",
          "learning checks", "buffer filling", "checkpoints", "records",
          "training and unlearning steps (the method)")

# The audit's shadow runs, timed in a fresh interpreter (the code under test on PYTHONPATH:
# the baseline's too, so only names every version has; the sequence comes as an argument).
_SHADOW_SCRIPT = """
import json, sys, tempfile, time
from pall_avalanche.audit.shadows import run_shadows
from pall_avalanche.config import CONFIG_DIR, load_config
from pall_avalanche.requests import Request, RequestSequence
method, n, text = sys.argv[1], int(sys.argv[2]), sys.argv[3]
config = {**load_config(CONFIG_DIR / "digits.yaml"), "epochs": 5}
requests = RequestSequence([Request("learn" if r[0] == "L" else "unlearn", int(r[1:]))
                            for r in text.split()], config["n_tasks"])
with tempfile.TemporaryDirectory() as out:
    start = time.perf_counter()
    records = run_shadows([method], n, config, out, requests=requests, show_progress=False,
                          jobs=1)
    seconds = time.perf_counter() - start
print(json.dumps({"runs": sum(len(r) for r in records.values()), "seconds": seconds}))
"""


def _calls(stats: pstats.Stats, path: str, name: str) -> list[tuple]:
    """The profiler keys of functions ``name`` in files ending with ``path``."""
    return [key for key in stats.stats if key[2] == name and key[0].endswith(path)]


def _cumulative(stats: pstats.Stats, path: str, name: str) -> float:
    return sum(stats.stats[key][3] for key in _calls(stats, path, name))


def _from(stats: pstats.Stats, path: str, name: str, caller_path: str,
          caller_name: str) -> float:
    """Cumulative time of ``name`` spent in calls from ``caller_name``."""
    total = 0.0
    for key in _calls(stats, path, name):
        for caller, edge in stats.stats[key][4].items():
            if caller[2] == caller_name and caller[0].endswith(caller_path):
                total += edge[3]
    return total


def phase_seconds(stats: pstats.Stats) -> dict[str, float]:
    """Seconds per phase (:data:`PHASES`) of the runs in a profile of a paper script, and
    ``"runs"``, ``"outside the runs"`` (start-up, planning, the report)."""
    runs = _cumulative(stats, "runs/engine.py", "run_and_write")
    measured = _cumulative(stats, "evaluation/measurement.py", "finish")
    dispatch = max(_cumulative(stats, "training/plugins/evaluation.py",
                               "_update_metrics_and_loggers"),
                   _cumulative(stats, "evaluation/avalanche_metrics.py",
                               "_update_metrics_and_loggers"))
    phases = {
        PHASES[0]: _cumulative(stats, "runs/engine.py", "_build"),
        # Avalanche's training loaders (the evaluation's go through plain DataLoaders) and
        # the device loader's batches as the training loop asks for them
        PHASES[1]: (_cumulative(stats, "benchmarks/utils/data_loader.py", "__iter__")
                    + _from(stats, "data/device.py", "_batches",
                            "update_type/sgd_update.py", "training_epoch")),
        PHASES[2]: dispatch - measured,
        PHASES[3]: _cumulative(stats, "evaluation/measurement.py", "evaluate_tasks"),
        PHASES[4]: _cumulative(stats, "evaluation/measurement.py", "_check_learning"),
        # (the module's path before and after the package moved it, one of them is measured)
        PHASES[5]: (_cumulative(stats, "pall_avalanche/rehearsal.py", "after_training_exp")
                    + _cumulative(stats, "rehearsal/memory.py", "after_training_exp")),
        PHASES[6]: _cumulative(stats, "runs/subscribers.py", "after_request"),
        PHASES[7]: (_cumulative(stats, "runs/records.py", "write_json_atomic")
                    + _cumulative(stats, "pall_avalanche/files.py", "write_json_atomic")
                    + _cumulative(stats, "runs/engine.py", "_record")),
    }
    phases[PHASES[8]] = runs - sum(phases.values())
    total = sum(stats.stats[key][2] for key in stats.stats)     # all own times: the wall
    return {**phases, "runs": runs, "outside the runs": total - runs}


def _run(command: list[str], code: Path, env: Mapping[str, str]) -> subprocess.CompletedProcess:
    result = subprocess.run(command, cwd=code, env=dict(env), capture_output=True, text=True,
                            check=False)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:]
        raise RuntimeError(f"{shlex.join(command)} failed in {code}: {' '.join(tail)}")
    return result


def measure(code: Path, *, shadows: int, scratch: Path) -> dict:
    """Every measurement of the module docstring for the code checked out at ``code``."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    scratch.mkdir(parents=True, exist_ok=True)
    out: dict = {}
    start = time.perf_counter()
    _run([sys.executable, "benchmarks/table1.py", "--quiet", "--out",
          str(scratch / "table1")], code, env)
    out["table1_seconds"] = time.perf_counter() - start
    for method in ("pall", "sequential"):
        result = _run([sys.executable, "-c", _SHADOW_SCRIPT, method, str(shadows),
                       " ".join(AUDIT_REQUESTS)], code, env)
        shadow = json.loads(result.stdout.strip().splitlines()[-1])
        out[f"shadow_{method}_seconds"] = shadow["seconds"] / shadow["runs"]
    profile = scratch / "phases.prof"
    _run([sys.executable, "-m", "cProfile", "-o", str(profile), "benchmarks/table1.py",
          "--seeds", "0", "--jobs", "1", "--quiet", "--out", str(scratch / "phases")],
         code, env)
    out["phases"] = phase_seconds(pstats.Stats(str(profile)))
    return out


def _worktree(ref: str, where: Path) -> Path:
    """A detached git worktree of ``ref`` at ``where`` (removed by :func:`_remove`)."""
    subprocess.run(["git", "worktree", "add", "--detach", str(where), ref], cwd=ROOT,
                   capture_output=True, text=True, check=True)
    return where


def _remove(where: Path) -> None:
    subprocess.run(["git", "worktree", "remove", "--force", str(where)], cwd=ROOT,
                   capture_output=True, check=False)


def report(args: argparse.Namespace, results: dict[str, dict], minutes: float) -> str:
    """The Markdown report of :func:`measure`'s results per code ("before", "after")."""
    import torch

    from pall_avalanche.reports import preamble
    from pall_avalanche.runs.engine import device_info, versions

    info = device_info(torch.device("cpu"))
    names = list(results)
    head = "| | " + " | ".join(names) + (" | ratio |" if len(names) == 2 else " |")
    rule = "|---" * (len(names) + 1 + (len(names) == 2)) + "|"

    def row(label: str, values: list[float], digits: int = 1) -> str:
        ratio = f" {values[0] / values[1]:.2f}× |" if len(values) == 2 and values[1] else ""
        return f"| {label} | " + " | ".join(f"{x:.{digits}f}" for x in values) + " |" + ratio

    codes = ", ".join(f"{name}: {results[name]['code']}" for name in names)
    lines = [*preamble("What a run costs besides the method",
                       f"python benchmarks/perf_runs.py {shlex.join(sys.argv[1:])}",
                       hardware=f"{info['name']}, {os.cpu_count()} cores, the machine quiet; "
                                "every measurement in a fresh interpreter, one after another; "
                                "torch's default threads unless a command sets them; "
                                f"{minutes:.1f} min in all",
                       versions=versions(), lines=[f"Code: {codes}"]), "",
             "## Wall times", "", head, rule,
             row("default `python benchmarks/table1.py` (65 runs, s)",
                 [results[n]["table1_seconds"] for n in names]),
             row("audit shadow run, PALL (s per run)",
                 [results[n]["shadow_pall_seconds"] for n in names], 2),
             row("audit shadow run, Sequential (s per run)",
                 [results[n]["shadow_sequential_seconds"] for n in names], 2), "",
             "## One seed of Table 1 in one process, by phase (s, under the profiler)", "",
             head, rule]
    for phase in (*PHASES, "runs", "outside the runs"):
        lines.append(row(phase, [results[n]["phases"][phase] for n in names], 2))
    overhead = [results[n]["phases"]["runs"]
                - results[n]["phases"][PHASES[-1]] for n in names]
    lines.append(row("runs besides the method (all phases but the method's steps)", overhead,
                     2))
    lines += ["", "The shadow runs: the audit's setting (digits, 5 epochs, the audited "
              f"sequence), {args.shadows} shadow runs each of the unlearned and the oracle "
              "role, with the probe, in one process. The phases come from the profiler's "
              "cumulative times of the functions that do each job; the profiler slows "
              "Python-heavy code more than arithmetic, so the phase shares, not their "
              "seconds, compare with the wall times."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> str:
    parser = Parser(prog="perf_runs.py", description=__doc__.split("\n\n")[0],
                    epilog=__doc__.split("\n\n", 1)[1],
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", metavar="REF",
                        help="a git commit to measure side by side with this code (checked "
                             "out into a temporary worktree)")
    parser.add_argument("--shadows", type=int, default=4,
                        help="shadow runs per role for the audit timing (default 4: 8 runs)")
    parser.add_argument("--report-dir", type=Path,
                        help="write perf_runs.md there (default: print only)")
    args = parser.parse_args(argv)
    if args.shadows < 4:
        raise ValueError(f"--shadows {args.shadows}: the audit needs at least 4")
    if args.baseline is not None:
        found = subprocess.run(["git", "rev-parse", "--verify", f"{args.baseline}^{{commit}}"],
                               cwd=ROOT, capture_output=True, text=True, check=False)
        if found.returncode != 0:
            raise ValueError(f"--baseline {args.baseline}: not a commit of {ROOT}")
    start = time.perf_counter()
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        if args.baseline is not None:
            code = _worktree(args.baseline, scratch / "baseline")
            try:
                results["before"] = {**measure(code, shadows=args.shadows,
                                               scratch=scratch / "b"), "code": args.baseline}
            finally:
                _remove(code)
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                              capture_output=True, text=True, check=False).stdout.strip()
        results["after" if args.baseline else "this code"] = {
            **measure(ROOT, shadows=args.shadows, scratch=scratch / "a"),
            "code": f"the working tree ({head or 'no git'})"}
    markdown = report(args, results, (time.perf_counter() - start) / 60)
    print(markdown)
    if args.report_dir is not None:
        args.report_dir.mkdir(parents=True, exist_ok=True)
        (args.report_dir / "perf_runs.md").write_text(markdown)
    return markdown


def cli(argv=None) -> None:
    main_guard(main, argv, prog=Path(__file__).name)


if __name__ == "__main__":
    cli()
