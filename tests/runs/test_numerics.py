"""A run's numerics: TensorFloat-32 on a GPU unless ``--no-tf32``; ``--deterministic``
switches torch to deterministic algorithms (with cuBLAS's fixed workspace), and an operation
that has none stops the run with one line naming it (a user's model unpooling, which torch
has no deterministic kernel for, on the CPU too)."""

from __future__ import annotations

import json
import os

import pytest
import torch
from helpers import FAST_CONFIG, benchmark_script

from pall_avalanche.runs.build import CUBLAS_DETERMINISTIC_WORKSPACE, build_run

FAST = ["--seeds", "0", "--set", "epochs=1", "--set", "train_per_task=40", "--quiet",
        "--methods", "sequential"]

UNPOOLING_MODEL = '''
import torch
from torch.nn import functional as F
from pall_avalanche import register_model


class Unpooling(torch.nn.Module):
    """Max-pools the image and unpools it to its size (F.max_unpool2d), then an MLP."""

    def __init__(self):
        super().__init__()
        self.layers = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 16),
                                          torch.nn.ReLU())

    def forward(self, x):
        pooled, where = F.max_pool2d(x, 2, return_indices=True)
        return self.layers(F.max_unpool2d(pooled, where, 2))


register_model("unpooling_mlp", lambda input_shape: (Unpooling(), 16))
'''


def run(args, capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as done:
        benchmark_script("table1").cli(args)
    out = capsys.readouterr()
    return done.value.code, out.out, out.err


@pytest.fixture
def restore_numerics():
    yield
    build_run("sequential", FAST_CONFIG, seed=0, measured=False)      # the defaults again


def test_a_run_sets_torchs_numerics_from_its_configuration(monkeypatch, restore_numerics):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    build_run("sequential", {**FAST_CONFIG, "deterministic": True, "tf32": False}, seed=0,
              measured=False)
    assert torch.are_deterministic_algorithms_enabled()
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == CUBLAS_DETERMINISTIC_WORKSPACE
    build_run("sequential", FAST_CONFIG, seed=0, measured=False)
    assert not torch.are_deterministic_algorithms_enabled()
    assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32


def test_the_flags_are_recorded_in_the_configuration(tmp_path, capsys, restore_numerics):
    code, _, err = run([*FAST, "--deterministic", "--no-tf32", "--jobs", "1",
                        "--out", str(tmp_path)], capsys)
    assert code == 0, err
    (path,) = tmp_path.rglob("seed0.json")
    config = json.loads(path.read_text())["config"]
    assert config["deterministic"] is True and config["tf32"] is False


def test_an_operation_without_a_deterministic_kernel_stops_the_run_in_one_line(
        tmp_path, capsys, restore_numerics):
    plugin = tmp_path / "unpooling.py"
    plugin.write_text(UNPOOLING_MODEL)
    args = [*FAST, "--plugin", str(plugin), "--set", "model=unpooling_mlp", "--jobs", "1"]
    code, _, err = run([*args, "--deterministic", "--out", str(tmp_path / "a")], capsys)
    assert code == 2
    (line,) = err.strip().splitlines()
    assert ("--deterministic: max_unpooling2d_forward_out has no deterministic "
            "implementation" in line and "run without --deterministic" in line)
    assert not list((tmp_path / "a").rglob("seed*.json"))
    code, _, err = run([*args, "--out", str(tmp_path / "b")], capsys)      # runs without it
    assert code == 0, err
