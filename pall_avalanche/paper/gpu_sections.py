"""The sections of ``benchmarks/gpu_check.py`` (:mod:`pall_avalanche.paper.gpu_check`): each
takes the :class:`CheckSetting` and returns a JSON-ready dict with ``passed`` (``True``,
``False`` or ``None`` where nothing can be judged) and a one-line ``summary``."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from pall_avalanche.catalog import METHOD_INFO
from pall_avalanche.config import apply_overrides, for_benchmark, resolve_method_config
from pall_avalanche.files import load_record
from pall_avalanche.masks import MaskSet, SubnetworkNet
from pall_avalanche.models import build_model
from pall_avalanche.paper.step_meter import StepMeter, iteration_probes, probe_loop_steps
from pall_avalanche.requests import RequestKind, RequestSequence
from pall_avalanche.requests.streams import RequestStream
from pall_avalanche.runs.build import build_run
from pall_avalanche.runs.engine import device_info, versions
from pall_avalanche.strategies.replay import TaskGEMPlugin

__all__ = ["CheckSetting", "SECTIONS"]

#: The table-1 command line, as an installed ``pall-table1`` runs it.
_TABLE1 = [sys.executable, "-c", "from pall_avalanche.paper.table1 import cli; cli()"]
#: The paper's seconds per S-TinyImageNet unlearning request (Table A7, A40 GPU).
PAPER_TINYIMAGENET_UNLEARNING_S = 2.59


@dataclass(frozen=True)
class CheckSetting:
    """Where and how large the check runs.

    :param device: the device checked.
    :param quick: the smallest settings (the same code paths, in seconds on a CPU).
    :param work: a scratch folder (dataset files, records, checkpoints).
    :param out: the folder of the report (the Table 1 section copies its report there).
    """

    device: str
    quick: bool
    work: Path
    out: Path

    @property
    def cuda(self) -> bool:
        return torch.device(self.device).type == "cuda"

    def vit(self) -> dict[str, Any]:
        """ViT-T/8's arguments: the paper's network, two blocks in quick mode."""
        return {"depth": 2} if self.quick else {}


def environment(setting: CheckSetting) -> dict:
    """Versions and the device."""
    info: dict[str, Any] = {"versions": versions(), "device": device_info(
        torch.device(setting.device))}
    if setting.cuda:
        index = torch.device(setting.device).index or 0
        properties = torch.cuda.get_device_properties(index)
        info.update(cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version(),
                    capability=list(torch.cuda.get_device_capability(index)),
                    memory_gib=round(properties.total_memory / 2**30, 1))
    name = info["device"]["name"]
    return {"passed": None, "summary": f"torch {torch.__version__} on {name}", **info}


def masks(setting: CheckSetting) -> dict:
    """The masks the device selects from the same scores, against the CPU's (numpy's
    partition there, the device's own selection here), and their packed bits."""
    rows = []
    for name, shape, alpha in (("resnet18", (3, 32, 32), 0.1), ("vit_t8", (3, 64, 64), 0.05)):
        torch.manual_seed(0)
        kwargs = setting.vit() if name == "vit_t8" else {}
        net = SubnetworkNet(build_model(name, input_shape=shape, n_tasks=20, classes_per_task=10,
                                        per_task_tokens=True, **kwargs), alpha)
        net.start_learning(0)
        on_cpu = {n: m.clone() for n, m in net.current_mask().items()}
        packed = MaskSet.from_bool(on_cpu).packed
        net.to(setting.device)
        on_device = net.current_mask()
        entries = sum(m.numel() for m in on_cpu.values())
        differ = sum(int((on_cpu[n] != m.cpu()).sum()) for n, m in on_device.items())
        bits = all(torch.equal(packed[n], p.cpu())
                   for n, p in MaskSet.from_bool(on_device).packed.items())
        rows.append({"model": name, "alpha": alpha, "tensors": len(on_cpu),
                     "entries": entries, "entries_differing": differ, "packed_equal": bits})
    passed = all(r["entries_differing"] == 0 and r["packed_equal"] for r in rows)
    return {"passed": passed, "rows": rows, "summary": ", ".join(
        f"{r['model']}: {r['entries_differing']} of {r['entries']:,} entries differ"
        for r in rows)}


class _SyncGuard:
    """Makes every synchronising CUDA operation raise between :meth:`start` and
    :meth:`stop` (torch's ``set_sync_debug_mode``); nothing off a GPU."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda

    def start(self) -> None:
        if self.cuda:
            torch.cuda.set_sync_debug_mode("error")

    def stop(self) -> None:
        if self.cuda:
            torch.cuda.set_sync_debug_mode("default")


def syncs(setting: CheckSetting) -> dict:
    """Every method learns and unlearns on digits with every training iteration and every
    step of its unlearning and retraining loops under ``set_sync_debug_mode("error")``,
    GEM's projection excepted (it solves its QP on the host by design)."""
    methods = [m for m, info in METHOD_INFO.items() if info.where.startswith("pall_avalanche.")
               and not info.where.startswith("pall_avalanche.audit.")]
    if setting.quick:
        methods = [m for m in methods if m in ("pall", "derpp", "gem", "hat")]
    base = apply_overrides(for_benchmark("digits"), {
        "epochs": 1, "train_per_task": 40, "n_retrain_iters": 3}.items())
    guard = _SyncGuard(setting.cuda)
    projection = TaskGEMPlugin.after_backward

    def unguarded(self, strategy, **kwargs):
        guard.stop()
        try:
            return projection(self, strategy, **kwargs)
        finally:
            guard.start()

    failures = {}
    TaskGEMPlugin.after_backward = unguarded
    try:
        for method in methods:
            config = {**resolve_method_config(base, method), "retrain_epochs": 1}
            start, stop = iteration_probes(guard)
            built = build_run(method, config, seed=0, device=setting.device, measured=False,
                              plugins=[stop])
            built.strategy.plugins.insert(0, start)
            probe_loop_steps(built.strategy, guard)
            try:
                for exp in RequestStream(built.benchmark, RequestSequence.parse(
                        "L0 L1 U0 L2", config["n_tasks"])):
                    built.strategy.train(exp)
            except RuntimeError as err:
                failures[method] = str(err).splitlines()[0]
            finally:
                guard.stop()
    finally:
        TaskGEMPlugin.after_backward = projection
    if not setting.cuda:
        return {"passed": None, "methods": methods, "failures": failures,
                "summary": f"{len(methods)} methods ran; a host synchronisation is only "
                           "detectable on a GPU"}
    return {"passed": not failures, "methods": methods, "failures": failures,
            "summary": f"{len(methods) - len(failures)} of {len(methods)} methods' steps "
                       "without a host synchronisation"}


def _table1(setting: CheckSetting, args: list[str]) -> list[str]:
    return [*_TABLE1, *args, "--device", setting.device, "--quiet"]


def resume(setting: CheckSetting) -> dict:
    """A run killed (SIGKILL) right after its first checkpoint and run again resumes and
    writes the record of an uninterrupted run, in deterministic mode, bit for bit."""
    methods = "pall" if setting.quick else "pall,derpp"
    args = ["--methods", methods, "--alpha", "0.2", "--seeds", "0", "--deterministic",
            "--jobs", "1", "--set", f"epochs={3 if setting.quick else 10}"]
    killed, whole = setting.work / "resume_killed", setting.work / "resume_whole"
    process = subprocess.Popen(_table1(setting, [*args, "--out", str(killed)]),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 600
    while not list(killed.rglob("*.ckpt")) and process.poll() is None:
        if time.monotonic() > deadline:
            process.kill()
            break
        time.sleep(0.01)
    interrupted = process.poll() is None
    if interrupted:
        process.send_signal(signal.SIGKILL)
    process.wait()
    again = subprocess.run(_table1(setting, [*args, "--out", str(killed)]),
                           capture_output=True, text=True)
    clean = subprocess.run(_table1(setting, [*args, "--out", str(whole)]),
                           capture_output=True, text=True)
    if again.returncode or clean.returncode:
        return {"passed": False, "summary": "a run failed: " + (
            again.stderr or clean.stderr).strip().splitlines()[-1]}
    records = {}
    for folder in (killed, whole):
        for path in sorted(folder.rglob("seed*.json")):
            record = load_record(path)
            records.setdefault(record["method"], []).append(record)
    resumed = [m for m, (a, _) in records.items() if a.get("resumed_after")]
    same = all(a["accuracy"] == b["accuracy"] for a, b in records.values())
    passed = interrupted and bool(resumed) and same
    return {"passed": passed, "killed_mid_run": interrupted, "resumed": resumed,
            "records_equal": same,
            "summary": (f"killed after the first checkpoint, resumed {resumed}; accuracy "
                        f"matrices {'bit-identical' if same else 'DIFFER'} to an "
                        "uninterrupted run" if interrupted else
                        "the run finished before it could be killed")}


def steps(setting: CheckSetting) -> dict:
    """PALL's learning step and retraining iteration beside a plain (Sequential) learning
    step: ResNet-18 at batch 32 on CIFAR-10 files and ViT-T/8 at the Tiny ImageNet
    configuration's batch on its files, float32 and bfloat16 autocast; kernels launched (aten
    operations off a GPU) and time per step (synchronised wall time; process time on a CPU).
    Learned: tasks 0-2, measured on task 2; retraining: unlearning task 0 (two remaining)."""
    rows = []
    for benchmark, batch in (("cifar10", 4 if setting.quick else 32),
                             ("tinyimagenet", 4 if setting.quick else None)):
        base = apply_overrides(for_benchmark(benchmark), {
            "data_root": str(setting.work), "epochs": 1, "n_tasks": 5 if benchmark ==
            "cifar10" else 20, "n_retrain_iters": 3 if setting.quick else 12,
            "train_per_task": 4 * (batch or 32) if setting.quick else None,
            **({"batch_size": batch} if batch else {})}.items())
        if benchmark == "tinyimagenet":
            base["model_kwargs"] = setting.vit()
        for amp in (None, "bf16"):
            for method in ("sequential", "pall"):
                config = {**resolve_method_config(base, method), "amp": amp, "alpha": 0.1}
                learning, retraining = StepMeter(setting.device), StepMeter(setting.device)
                start, stop = iteration_probes(learning, 2)
                built = build_run(method, config, seed=0, device=setting.device,
                                  measured=False, plugins=[stop])
                built.strategy.plugins.insert(0, start)
                probe_loop_steps(built.strategy, retraining)
                for exp in RequestStream(built.benchmark, RequestSequence.parse(
                        "L0 L1 L2 U0", config["n_tasks"])):
                    built.strategy.train(exp)
                for kind, meter in (("learning", learning), ("retraining", retraining)):
                    if meter.ops is not None:
                        rows.append({"model": config["model"], "batch": config["batch_size"],
                                     "amp": amp or "fp32", "method": method, "step": kind,
                                     "aten_ops": meter.ops, "kernels": meter.kernels,
                                     "ms": _median_ms(meter)})
    return {"passed": None, "rows": rows, "summary": f"{len(rows)} step kinds measured"}


def _median_ms(meter: StepMeter) -> float | None:
    times = sorted(meter.times)
    return round(1e3 * times[len(times) // 2], 3) if times else None


def tinyimagenet(setting: CheckSetting) -> dict:
    """PALL with ViT-T/8 learns the 20 tasks of the Tiny ImageNet files (one epoch of their
    images each) and unlearns one (N_f = 50 retraining iterations at the configuration's
    batch of 256, split over 19 remaining tasks): its seconds beside the paper's."""
    overrides = {"data_root": str(setting.work), "epochs": 1,
                 "model_kwargs": setting.vit(), "alpha": 0.05}
    if setting.quick:
        overrides.update(batch_size=16, eval_batch_size=64, n_retrain_iters=2,
                         buffer_size=200)
    config = resolve_method_config(apply_overrides(for_benchmark("tinyimagenet"),
                                                   overrides.items()), "pall")
    from pall_avalanche.runs import run_record

    requests = [{"kind": RequestKind.LEARN.value, "task": t} for t in range(20)]
    requests.append({"kind": RequestKind.UNLEARN.value, "task": 7})
    record = run_record("pall", 0, config, requests=requests, device=setting.device)
    seconds = record["timings"]["unlearn_seconds"]
    learned = [row[t] for t, row in enumerate(record["accuracy"][:20])]
    return {"passed": None, "unlearning_seconds": round(seconds, 3),
            "paper_seconds": PAPER_TINYIMAGENET_UNLEARNING_S,
            "n_retrain_iters": config["n_retrain_iters"], "batch_size": config["batch_size"],
            "learned_accuracy_mean": round(sum(learned) / len(learned), 2),
            "summary": f"one unlearning request at T = 20 (N_f = {config['n_retrain_iters']}, "
                       f"batch {config['batch_size']}, ViT-T/8"
                       f"{' with 2 blocks' if setting.quick else ''}): {seconds:.2f} s (the "
                       f"paper, on an A40 at N_f = 50, batch 256: "
                       f"{PAPER_TINYIMAGENET_UNLEARNING_S} s; random images here)"}


def table1(setting: CheckSetting) -> dict:
    """``table1.py --benchmark cifar10`` on the CIFAR-10 files with two workers (``--jobs
    2``), one epoch of a subsample of each task; its report is copied beside the check's."""
    args = ["--benchmark", "cifar10", "--data-root", str(setting.work), "--seeds", "0",
            "--jobs", "2", "--set", "epochs=1", "--out", str(setting.work / "table1"),
            "--report-dir", str(setting.work / "table1")]
    if setting.quick:
        args += ["--methods", "sequential,pall", "--alpha", "0.2", "--set",
                 "train_per_task=8", "--set", "n_retrain_iters=2"]
    else:
        args += ["--set", "train_per_task=256"]
    done = subprocess.run(_table1(setting, args), capture_output=True, text=True)
    report = setting.work / "table1" / "table1_cifar10.md"
    if done.returncode or not report.is_file():
        return {"passed": False, "summary": "table1.py failed: " + (
            done.stderr.strip().splitlines() or ["no output"])[-1]}
    shutil.copy(report, setting.out / "table1_cifar10.md")
    runs = len(list((setting.work / "table1").rglob("seed*.json")))
    return {"passed": True, "records": runs,
            "summary": f"{runs} records with two workers on {setting.device}; report "
                       "table1_cifar10.md"}


#: name → section, in the order they run.
SECTIONS = {"environment": environment, "masks": masks, "syncs": syncs, "resume": resume,
            "steps": steps, "tinyimagenet": tinyimagenet, "table1": table1}
