"""``benchmarks/gpu_check.py --device cpu --quick``: every section of the GPU check runs its
code paths here (on the CPU what only a GPU can show is reported as not measurable), the
folder receives its three files, and bad options are refused in one line."""

from __future__ import annotations

import json

import pytest
import torch

from pall_avalanche.paper.gpu_check import SECTION_NAMES, main


def test_the_quick_check_runs_every_section_on_the_cpu(tmp_path):
    results = main(["--device", "cpu", "--quick", "--out", str(tmp_path)])
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "gpu_check.json", "gpu_check.md", "table1_cifar10.md"]
    sections = results["sections"]
    assert list(sections) == list(SECTION_NAMES)
    assert {n: o["passed"] for n, o in sections.items()} == {
        "environment": None, "masks": True, "syncs": None, "resume": True, "steps": None,
        "tinyimagenet": None, "table1": True}
    assert json.loads((tmp_path / "gpu_check.json").read_text())["sections"].keys() == \
        sections.keys()
    assert all(r["entries_differing"] == 0 for r in sections["masks"]["rows"])
    assert sections["resume"]["killed_mid_run"] and sections["resume"]["resumed"] == ["pall"]
    steps = {(r["model"], r["amp"], r["method"], r["step"]) for r in sections["steps"]["rows"]}
    assert ("resnet18", "bf16", "pall", "retraining") in steps
    assert ("vit_t8", "fp32", "sequential", "learning") in steps
    assert sections["tinyimagenet"]["unlearning_seconds"] > 0
    report = (tmp_path / "gpu_check.md").read_text()
    assert "| resume | ok |" in report and "## Step costs" in report
    assert "| Method |" in (tmp_path / "table1_cifar10.md").read_text()


def test_bad_options_are_refused_before_anything_runs(tmp_path):
    with pytest.raises(ValueError, match="--sections nope: unknown; valid: environment"):
        main(["--sections", "nope", "--out", str(tmp_path)])
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="--device cuda: CUDA is not available"):
            main(["--out", str(tmp_path)])
    assert not list(tmp_path.iterdir())
