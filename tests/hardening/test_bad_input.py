"""Every bad option or file is refused in one line (exit 2) naming it, before anything
trains: a table of the cases a hostile tester found, run through the scripts' own entry
points."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from helpers import benchmark_script

ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
    f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
    f"*{chr(97 + i)}, *{chr(97 + i)}]\n" for i in range(8))


def _files(tmp: Path) -> dict[str, Path]:
    files = {
        "bomb.yaml": ALIAS_BOMB,
        "latin1.yaml": "epochs: 1\n# caf\xe9\n",
        "recursive.yaml": "a: &a [1, *a]\n",
        "empty_seeds.yaml": "seeds: []\n",
        "requests_latin1.json": '[{"kind": "learn", "task": 0}] \xe9',
        "requests_deep.json": "[" * 50_000 + "]" * 50_000,
        "requests_float.json": '[{"kind": "learn", "task": 0.5}]',
    }
    paths = {}
    for name, text in files.items():
        paths[name] = tmp / name
        paths[name].write_bytes(text.encode("latin-1" if "latin1" in name else "utf-8"))
    return paths


# (arguments with {tmp}/{name} placeholders, what the one line must contain)
CASES = {
    "empty --out": (["--out", ""], "argument --out: '' is empty; give a folder"),
    "--out reports": (["--out", "reports"], "--out reports: records go to a results folder"),
    "seed twice": (["--seeds", "0", "0"], "--seeds 0 0: seed(s) [0] given more than once"),
    "seed too large": (["--seeds", "4294967296"], "'4294967296' is too large; give a seed "
                                                  "from 0 to 2147483647"),
    "negative seed": (["--seeds", "-1"], "argument --seeds"),
    "meta device": (["--device", "meta"], "--device meta: runs train on cpu, cuda, cuda:N, "
                                          "mps or xpu, not on meta"),
    "benchmark path": (["--benchmark", "../../etc/x"], "--benchmark ../../etc/x: unknown "
                                                       "benchmark"),
    "alias bomb": (["--config", "{bomb.yaml}"], "more than 100000 values once its aliases "
                                                 "are expanded"),
    "not UTF-8": (["--config", "{latin1.yaml}"], "latin1.yaml: not UTF-8 text (byte 0xe9"),
    "recursive alias": (["--config", "{recursive.yaml}"], "a YAML alias inside itself"),
    "empty seeds": (["--config", "{empty_seeds.yaml}"], "a non-empty list of distinct "
                                                        "integers"),
    "non-ASCII digit": (["--requests", "L0 L\u0661"], "--requests L0 L\u0661: no such file"),
    "requests not UTF-8": (["--requests", "{requests_latin1.json}"], "not UTF-8 text"),
    "requests nested": (["--requests", "{requests_deep.json}"], "nested too deeply"),
    "task not an integer": (["--requests", "{requests_float.json}"], "task id 0.5 is not an "
                                                                     "integer"),
    "model_kwargs": (["--set", "model_kwargs={width: 3}"], "model_kwargs {'width': 3}: the mlp "
                                                            "model refuses them"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_refused_in_one_line_before_anything_trains(tmp_path, capsys, case):
    paths = _files(tmp_path)
    arguments, expected = CASES[case]
    for name, path in paths.items():
        arguments = [a.replace(f"{{{name}}}", str(path)) for a in arguments]
    if "--out" not in arguments:
        arguments += ["--out", str(tmp_path / "out")]
    started = time.perf_counter()
    with pytest.raises(SystemExit) as exit_info:
        benchmark_script("table1").cli(["--methods", "sequential", "--epochs", "1", "--quiet",
                                        *arguments])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2, err
    assert len(err) == 1 and expected in err[0], err
    assert not list(tmp_path.rglob("seed*.json"))          # nothing trained
    assert time.perf_counter() - started < 30


def test_check_method_refuses_a_negative_seed_at_once(capsys):
    from pall_avalanche.check_method import cli

    with pytest.raises(SystemExit) as exit_info:
        cli(["sequential", "--seed", "-1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(err) == 1
    assert "argument --seed: '-1' is invalid; give an integer >= 0" in err[0]
