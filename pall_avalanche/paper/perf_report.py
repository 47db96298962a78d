"""The two modes of ``perf_masking.py`` once its input is checked: the CPU figures side by side
(:func:`run_default`) and the paper's Table A7 on this machine with the device-hours of every
paper table (:func:`run_table`); each prints its figures and writes them as Markdown."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import torch

from pall_avalanche.config import resolve_method_config
from pall_avalanche.paper.gpu_hours import PAPER_A7, PAPER_TABLES, estimate_hours
from pall_avalanche.paper.gpu_table import COLUMNS, measure_column, selection_milliseconds
from pall_avalanche.paper.masking_cost import measure_masking, measure_pipeline
from pall_avalanche.reports import preamble
from pall_avalanche.runs.engine import device_info, versions

__all__ = ["run_default", "run_table"]


def _command(argv_text: str) -> str:
    return f"python benchmarks/perf_masking.py {argv_text}".strip()


def _preamble(args: argparse.Namespace, title: str, scale: str) -> list[str]:
    device = torch.device(args.device)
    info = device_info(device)
    where = info["name"] + (f", {info['threads']} torch thread(s)" if "threads" in info else "")
    return [*preamble(title, _command(shlex.join(sys.argv[1:])),
                      hardware=f"{device.type}, {where}", versions=versions(),
                      lines=[f"Scale: {scale}"]), ""]


def _write(report_dir: Path, name: str, markdown: str) -> Path:
    report_dir.mkdir(parents=True, exist_ok=True)
    path = report_dir / name
    path.write_text(markdown)
    return path


def run_default(args: argparse.Namespace) -> str:
    """PALL vs Sequential step times, one unlearning request, the mask storage and the input
    pipelines' images per second, printed (and written to ``--report-dir``/perf_masking.md
    when given)."""
    out = measure_masking(batch_size=args.batch_size, iterations=args.iterations,
                          warmup=args.warmup, tasks=args.tasks, model=args.model,
                          device_name=args.device, threads=args.threads, seed=args.seed)
    rates = measure_pipeline(per_task=args.pipeline_images, batch_size=args.batch_size,
                             repeats=args.pipeline_repeats, threads=args.threads,
                             device_name=args.device, seed=args.seed)
    medians = out["medians"]
    n_steps = args.tasks * (args.iterations - args.warmup)
    rows = [(f"{m.capitalize() if m == 'sequential' else 'PALL'} step (median)",
             f"{medians[m, 'wall'] * 1e3:.1f} ms wall, {medians[m, 'cpu'] * 1e3:.1f} ms CPU")
            for m in ("sequential", "pall")]
    rows += [(f"**PALL / Sequential step-time ratio** ({out['clock']} time)",
              f"**{out['ratio']:.3f}**"),
             (f"one PALL unlearning request (re-draw + {out['n_retrain_iters']} retraining "
              "iterations)", f"{out['unlearn_seconds']:.2f} s"),
             ("mask storage per task", f"{out['mask_bytes_per_task'] / 2**20:.3f} MiB in "
              f"memory (bit-packed), {out['mask_disk_bytes_per_task'] / 2**20:.3f} MiB on disk"),
             ("input pipeline, per sample (DataLoader, torchvision transforms)",
              f"{rates['per_sample']:,.0f} images/s"),
             ("input pipeline, batched (one uint8 tensor, augmented as a batch)",
              f"{rates['batched']:,.0f} images/s"),
             ("**batched / per-sample images per second**",
              f"**{rates['batched'] / rates['per_sample']:.1f}×**")]
    scale = (f"{args.model}, batch {args.batch_size}, {n_steps} timed steps per method over "
             f"{args.tasks} tasks (first {args.warmup} of each discarded); input pipelines: "
             f"{args.pipeline_repeats} alternating passes each over {args.pipeline_images} "
             "images of one synthetic S-CIFAR10 task (random crop with 4-pixel padding, flip, "
             "normalisation), median pass; synthetic uint8 CIFAR-shaped images, a timing "
             "benchmark, not an accuracy run")
    lines = _preamble(args, "Masking and input cost — PALL vs Sequential, per-sample vs "
                              "batched input (CIFAR shape)", scale)
    lines += ["| figure | value |", "|---|---|", *(f"| {a} | {b} |" for a, b in rows), "",
              "Both strategies train the same images in the same order (their random crops "
              "and flips differ), alternating task by task in one process; a step is one "
              "Avalanche training iteration (forward, loss, backward, PALL's gradient "
              "masking, optimizer step on weights and scores), its input already made. "
              "PALL's extra cost per step: the per-layer thresholds, the "
              "fused straight-through estimator in forward and backward, the frozen-entry "
              "gradient mask and the optimizer step on the scores. Each retraining iteration "
              "of the unlearning request passes two mini-batches (cross-entropy and "
              "logit-MSE), so N_f iterations cost about 2·N_f training steps.", "",
              "The input pipelines make the same augmentation of the same task: per sample, "
              "a DataLoader in the training process (num_workers=0) applies torchvision's "
              "transforms image by image; batched, the task's uint8 images are one tensor on "
              "the training device (here the CPU) and every batch is cropped, flipped and "
              "normalised as one tensor operation.", "",
              "The paper's implementation makes PALL about 10× slower per epoch than plain "
              "training on an A40 (Table A7: 33.1 vs 3.23 s, ResNet-18). No GPU figure is "
              "committed: `python benchmarks/perf_masking.py --device cuda --table` measures "
              "that table on a GPU.", ""]
    markdown = "\n".join(lines)
    print(markdown)
    if args.report_dir is not None:
        print(f"written: {_write(args.report_dir, 'perf_masking.md', markdown)}")
    print(f"pall / sequential step-time ratio ({out['clock']} time):")
    print(f"{out['ratio']:.3f}")
    return markdown


def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g} s"


def run_table(args: argparse.Namespace) -> str:
    """Table A7 on ``--device`` for ``--columns``, the selection methods compared, and the
    device-hours of every paper table; printed and written to ``--report-dir``."""
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    columns = [COLUMNS[name] for name in args.columns]
    timings, selection, configs = {}, {}, {}
    for column in columns:
        print(f"measuring {column.label} ...", file=sys.stderr)
        timings[column.benchmark] = measure_column(
            column, device, images_per_task=args.table_images,
            retrain_iters=args.retrain_iters, compile=args.compile, seed=args.seed)
        selection[column.benchmark] = selection_milliseconds(column, device,
                                                             repeats=args.repeats,
                                                             seed=args.seed)
        config = column.config()
        configs[column.benchmark] = {**config, "methods": {
            "er_retrain": resolve_method_config(config, "er_retrain")}}
    reduced = args.table_images is not None
    scale = ("one epoch per column of every timed method (the second learning request), "
             + (f"{args.table_images} synthetic images per task, seconds scaled to the full "
                "task (a reduced run)" if reduced else "the full task of synthetic images")
             + (", backbones compiled (torch.compile)" if args.compile else ""))
    lines = _preamble(args, f"Table A7 on {device_info(device)['name']}", scale)
    lines += table_lines(columns, timings, selection, configs)
    markdown = "\n".join(lines)
    print(markdown)
    report_dir = args.report_dir or Path("results/perf_masking")
    name = f"perf_masking_table_{device.type}.md"
    print(f"written: {_write(report_dir, name, markdown)}", file=sys.stderr)
    return markdown


def table_lines(columns: list, timings: dict, selection: dict, configs: dict) -> list[str]:
    """The Markdown of the table mode: Table A7's seconds (scaled to the full task) beside the
    paper's, the selection milliseconds per threshold method, and the device-hours of every
    paper table (:func:`~pall_avalanche.paper.gpu_hours.estimate_hours`).

    :param columns: the measured :class:`~pall_avalanche.paper.gpu_table.Column` s.
    :param timings: benchmark → :func:`~pall_avalanche.paper.gpu_table.measure_column`.
    :param selection: benchmark → threshold method → milliseconds per step.
    :param configs: benchmark → its configuration.
    """
    lines = []
    header = " | ".join(c.label for c in columns)
    lines += ["Seconds per learning epoch (the second task) and per unlearning request; the "
              "paper's A40 figures in brackets.", "",
              f"| method | {header} |", "|---|" + "---|" * len(columns)]
    methods = list(next(iter(timings.values()))["epoch_seconds"])
    for method in methods:
        cells = []
        for column in columns:
            timing = timings[column.benchmark]
            seconds = timing["epoch_seconds"][method] * timing["full_task"] / \
                timing["images_per_task"]
            paper = PAPER_A7.get(method, {}).get(column.benchmark)
            cells.append(f"{seconds:.3g} s/epoch" + (f" [{paper[0]}]" if paper else ""))
        auto = timings[columns[0].benchmark]["auto"]
        label = f"{method} ({auto})" if method in ("wsn", "pall") else method
        lines.append(f"| {label} | {' | '.join(cells)} |")
    n_f = timings[columns[0].benchmark]["n_retrain_iters"]
    lines.append(f"| pall, one unlearning request (N_f = {n_f}) | " + " | ".join(
        f"{_seconds(timings[c.benchmark]['unlearn_seconds'])} "
        f"[{PAPER_A7['pall'][c.benchmark][1]}]" for c in columns) + " |")
    lines += ["", "Milliseconds per training step selecting every scored layer's mask "
              "(median of synchronised timings), per threshold method "
              "(`--mask-threshold`; the masks are the same bit for bit):", "",
              f"| threshold | {header} |", "|---|" + "---|" * len(columns)]
    for method in selection[columns[0].benchmark]:
        lines.append(f"| {method} | " + " | ".join(
            f"{selection[c.benchmark][method]:.3g} ms" for c in columns) + " |")
    hours = estimate_hours(PAPER_TABLES, timings, configs)
    total = sum(row["hours"] or 0.0 for row in hours)
    lines += ["", "Estimated device-hours of every paper table at the paper's scale (its "
              "configuration's seeds and epochs; methods not timed here scaled from Sequential "
              "by the paper's Table A7 ratios; unlearning requests as the one timed, with one "
              "remaining task, so a lower bound where more remain; evaluation not counted):",
              "",
              "| table | benchmark | runs | hours |", "|---|---|---|---|"]
    lines += [f"| {r['table']} | {r['benchmark']} | {r['runs']} | "
              f"{r['note'] or format(r['hours'], '.1f')} |" for r in hours]
    lines += [f"| **all** | | {sum(r['runs'] for r in hours)} | **{total:.1f}** |", ""]
    return lines
