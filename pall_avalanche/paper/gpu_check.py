"""One prepared check of the GPU path: versions and device, masks equal to the CPU's, no host
synchronisation inside any method's step, kill and resume, step costs, an unlearning request
at T = 20, a short Table 1 with two workers.

    python benchmarks/gpu_check.py                         # on cuda, into results/gpu_check
    python benchmarks/gpu_check.py --out reports/gpu_check_h100
    python benchmarks/gpu_check.py --device cpu --quick    # the same code paths, in seconds

Sections (``--sections`` runs some of them; each is a function of
``pall_avalanche.paper.gpu_sections``):

- **environment**: Python, torch, CUDA, cuDNN, the device and its memory;
- **masks**: the masks the device selects from the same scores equal the CPU's bit for bit
  (ResNet-18 at α = 0.1, ViT-T/8 at α = 0.05), and so do their packed bits;
- **syncs**: every method learns and unlearns digits with each training iteration and each
  step of its unlearning and retraining loops under ``torch.cuda.set_sync_debug_mode
  ("error")`` (GEM's projection excepted: it solves its QP on the host by design);
- **resume**: ``table1.py`` (PALL and DER++, ``--deterministic``) killed with SIGKILL right
  after its first checkpoint, run again: it resumes and its records equal an uninterrupted
  run's, bit for bit;
- **steps**: kernels launched and milliseconds per step of PALL's learning step and
  retraining iteration beside Sequential's step, for ResNet-18 (batch 32, CIFAR-10 files) and
  ViT-T/8 (batch 256, Tiny ImageNet files), float32 and bfloat16 autocast;
- **tinyimagenet**: PALL with ViT-T/8 learns the 20 tasks of Tiny ImageNet files in the
  official layout (random images) and unlearns one: the request's seconds beside the paper's;
- **table1**: ``table1.py --benchmark cifar10 --jobs 2`` on CIFAR-10 files in the official
  layout (random images), one epoch of 256 images per task.

The folder ``--out`` receives ``gpu_check.md`` (the report), ``gpu_check.json`` (every
figure) and ``table1_cifar10.md``; dataset files, records and checkpoints go to a temporary
folder. A section that fails is reported and the next one runs; the command exits 1 if one
failed. Running it without network on a machine whose image has torch:
docs/how-to/gpu.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import tempfile
import time
import traceback
from pathlib import Path

from pall_avalanche.cli import Parser, check_device, check_writable
from pall_avalanche.exit_codes import main_guard

__all__ = ["cli", "main"]

SECTION_NAMES = ("environment", "masks", "syncs", "resume", "steps", "tinyimagenet", "table1")


def main(argv=None) -> dict:
    parser = Parser(prog="gpu_check.py", description=__doc__.split("\n\n")[0],
                    epilog=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="the device checked (default cuda)")
    parser.add_argument("--quick", action="store_true",
                        help="the smallest settings: the same code paths, in seconds")
    parser.add_argument("--out", type=Path, default=Path("results/gpu_check"),
                        help="folder of the report (default results/gpu_check)")
    parser.add_argument("--sections", nargs="+", default=list(SECTION_NAMES),
                        help=f"sections to run (default: all of {', '.join(SECTION_NAMES)})")
    args = parser.parse_args(argv)
    unknown = [s for s in args.sections if s not in SECTION_NAMES]
    if unknown:
        raise ValueError(f"--sections {' '.join(unknown)}: unknown; valid: "
                         f"{', '.join(SECTION_NAMES)}")
    check_device(args.device)
    check_writable(args.out, "--out")
    from pall_avalanche.data.synthetic import write_cifar10, write_tinyimagenet
    from pall_avalanche.paper.gpu_sections import SECTIONS, CheckSetting

    results: dict = {"command": shlex.join(["python", "benchmarks/gpu_check.py",
                                            *(argv if argv is not None else sys.argv[1:])]),
                     "machine": platform.node(), "sections": {}}
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as work:
        setting = CheckSetting(args.device, args.quick, Path(work), args.out)
        if {"steps", "tinyimagenet", "table1"} & set(args.sections):
            write_cifar10(work, train_per_class=16 if args.quick else 1280,
                          test_per_class=4 if args.quick else 20)
            write_tinyimagenet(work, train_per_class=2 if args.quick else 10,
                               val_per_class=1 if args.quick else 2)
        for name in [s for s in SECTION_NAMES if s in args.sections]:
            start = time.perf_counter()
            try:
                outcome = SECTIONS[name](setting)
            except Exception as err:       # reported, and the next section runs
                outcome = {"passed": False, "summary": f"{type(err).__name__}: {err}",
                           "traceback": traceback.format_exc()}
            outcome["seconds"] = round(time.perf_counter() - start, 1)
            results["sections"][name] = outcome
            print(f"{name}: {_verdict(outcome)} ({outcome['seconds']} s) {outcome['summary']}",
                  flush=True)
    (args.out / "gpu_check.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    (args.out / "gpu_check.md").write_text(render(results, args.quick))
    failed = [n for n, o in results["sections"].items() if o["passed"] is False]
    if failed:
        raise RuntimeError(f"gpu check: {', '.join(failed)} failed (see {args.out})")
    return results


def _verdict(outcome: dict) -> str:
    return {True: "ok", False: "FAIL", None: "measured"}[outcome["passed"]]


def render(results: dict, quick: bool) -> str:
    """The Markdown report: one line per section, then the step costs."""
    sections = results["sections"]
    device = sections.get("environment", {}).get("device", {}).get("name", "?")
    lines = ["# GPU check" + (" (quick: reduced settings)" if quick else ""), "",
             f"Command: `{results['command']}` on {results['machine']} ({device}).", "",
             "| Section | Result | Seconds | What was seen |", "|---|---|---|---|"]
    lines += [f"| {name} | {_verdict(o)} | {o['seconds']} | {o['summary']} |"
              for name, o in sections.items()]
    steps = sections.get("steps", {}).get("rows")
    if steps:
        lines += ["", "## Step costs", "",
                  "| Model | Batch | Precision | Method | Step | aten ops | Kernels | ms |",
                  "|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['model']} | {r['batch']} | {r['amp']} | {r['method']} | {r['step']} "
                  f"| {r['aten_ops']} | {r['kernels'] if r['kernels'] is not None else '—'} "
                  f"| {r['ms'] if r['ms'] is not None else '—'} |" for r in steps]
    return "\n".join(lines) + "\n"


def cli(argv=None) -> None:
    main_guard(main, argv, prog=Path(__file__).name)


if __name__ == "__main__":
    cli()
