"""A method, a benchmark and a model of one's own, from a file outside the package: registered
once, reached by every script through --plugin (in --jobs workers too) and by installed
packages' entry points, its own configuration keys checked like built-in ones, its benchmark
checked, and its records saying which plugin code made them."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import yaml
from avalanche.benchmarks import nc_benchmark
from helpers import FAST_CONFIG, benchmark_script
from sklearn.datasets import load_digits

from pall_avalanche import Key, Method, register_method, register_model
from pall_avalanche.catalog import BENCHMARK_INFO, METHOD_INFO
from pall_avalanche.config import check_setting, resolve_method_config
from pall_avalanche.data import build_benchmark, check_benchmark
from pall_avalanche.extensions import load_extensions
from pall_avalanche.files import read_record
from pall_avalanche.models import build_model
from pall_avalanche.strategies import build_strategy
from pall_avalanche.sweeps import expand_sweep

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "examples" / "l2_init_plugin.py"
FAST = ["--seeds", "0", "--set", "epochs=1", "--set", "train_per_task=40", "--quiet"]


def plugin_module():
    """The example plugin, as --plugin loads it (its classes, for building benchmarks)."""
    load_extensions([str(PLUGIN)])
    return next(m for name, m in sys.modules.items()
                if name.startswith("pall_avalanche_extension_l2_init_plugin_"))


def run_cli(name: str, args: list[str], capsys) -> tuple[int, str, str]:
    """A script's guarded command line in-process: (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as done:
        benchmark_script(name).cli(args)
    out = capsys.readouterr()
    return done.value.code, out.out, out.err


def records(folder: Path) -> list[dict]:
    return [read_record(p) for p in sorted(folder.rglob("seed*.json"))]


def test_a_plugin_method_runs_in_table1_with_jobs_and_its_records_name_the_plugin(
        tmp_path, capsys):
    out = tmp_path / "out"
    code, stdout, err = run_cli("table1", [
        "--plugin", str(PLUGIN), "--methods", "l2_init,sequential", "--jobs", "2",
        "--set", "methods.l2_init.l2_strength=0.5", "--out", str(out), *FAST], capsys)
    assert code == 0, err
    assert "| L2-init |" in stdout and "| Sequential |" in stdout
    mine = [r for r in records(out) if r["method"] == "l2_init"]
    assert len(mine) == 1 and mine[0]["config"]["l2_strength"] == 0.5
    digest = hashlib.sha256(PLUGIN.read_bytes()).hexdigest()
    assert {"extension": str(PLUGIN), "sha256": digest} in mine[0]["extensions"]


def test_a_methods_own_key_reaches_its_strategy_with_its_default_and_its_override():
    load_extensions([str(PLUGIN)])
    config = {**FAST_CONFIG, "benchmark": "digits", "n_tasks": 5, "n_unlearn": 1,
              "methods": {"l2_init": {"l2_strength": 0.25}}}
    for overrides, expected in (({}, 0.01), (config["methods"], 0.25)):
        resolved = resolve_method_config({**config, "methods": overrides}, "l2_init")
        net = build_model("mlp", input_shape=(1, 8, 8), n_tasks=5, classes_per_task=2)
        assert build_strategy("l2_init", model=net, config=resolved).l2_strength == expected


@pytest.mark.parametrize("setting, message", [
    ("methods.l2_init.l2_strength=abc",
     r"--set methods.l2_init.l2_strength=abc: l2_strength \(weight of the L2 pull towards the "
     r"initial weights\) "
     r"must be a number >= 0, got 'abc'"),
    ("methods.l2_init.l2_strength=-1", r"must be >= 0, got -1"),
    ("l2_strength=-0.5", r"--set l2_strength=-0.5: l2_strength \(weight of the L2 pull towards "
                         r"the initial weights\) must be >= 0, got -0.5"),
    ("methods.sequential.l2_strength=0.5", r"--set methods.sequential.l2_strength=0.5: method "
                                           r"'sequential' takes no key 'l2_strength' \(methods "
                                           r"that do: l2_init\); its keys: none"),
])
def test_a_bad_own_key_is_refused_in_one_line_like_a_built_in_key(tmp_path, capsys, setting,
                                                                    message):
    code, _, err = run_cli("table1", ["--plugin", str(PLUGIN), "--methods", "l2_init,sequential",
                                      "--set", setting, "--out", str(tmp_path / "out"), *FAST],
                           capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert re.search(message, err), err
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("*.json"))


@pytest.mark.parametrize("content, message", [
    ("import no_such_module_anywhere\n",
     r"--plugin .*bad\.py: ModuleNotFoundError: No module named 'no_such_module_anywhere'"),
    ("from pall_avalanche import Method, register_method\n"
     "register_method(Method('pall', 'x.y:Z', exact=True))\n",
     r"--plugin .*bad\.py: ValueError: method 'pall' is already registered "
     r"\(pall_avalanche.strategies.pall:PALL\); pick another name"),
    ("def broken(:\n", r"--plugin .*bad\.py: SyntaxError"),
])
def test_a_plugin_that_fails_or_takes_a_name_is_refused_in_one_line(tmp_path, capsys, content,
                                                                    message):
    bad = tmp_path / "bad.py"
    bad.write_text(content)
    code, _, err = run_cli("table1", ["--plugin", str(bad), "--out", str(tmp_path / "out"),
                                      *FAST], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert re.search(message, err), err


def test_a_plugin_benchmark_runs_through_benchmark_and_config(tmp_path, capsys):
    config = tmp_path / "mine.yaml"
    config.write_text(yaml.safe_dump({"benchmark": "digits_in_order", "n_unlearn": 2}))
    for how in (["--benchmark", "digits_in_order"], ["--config", str(config)]):
        out = tmp_path / how[0].strip("-")
        code, stdout, err = run_cli("table1", ["--plugin", str(PLUGIN), *how, "--methods",
                                               "pall", "--alpha", "0.2", "--out", str(out),
                                               *FAST], capsys)
        assert code == 0, err
        (record,) = records(out)
        assert record["benchmark"] == record["split"]["name"] == "digits_in_order"
        assert record["split"]["classes_per_task"] == 2 and record["split"]["n_tasks"] == 5
        assert record["metrics"]["F_l"] == 0.0              # PALL on the user's benchmark
    # nc_benchmark's fixed class order: task t holds the test digits 2t and 2t+1, by hand
    target = load_digits().target
    test = target[int(0.8 * len(target)):]
    bm = build_benchmark("digits_in_order", seed=0)
    assert [len(e.dataset) for e in bm.test_stream] == [
        int(((test == 2 * t) | (test == 2 * t + 1)).sum()) for t in range(5)]


def tiny_benchmark(**options):
    x = torch.arange(40 * 4, dtype=torch.float32).reshape(40, 1, 2, 2)
    data = plugin_module().Digits(x, torch.arange(40) % 4)
    return nc_benchmark(data, data, n_experiences=2, seed=0, fixed_class_order=[0, 1, 2, 3],
                        **options)


def test_a_benchmark_is_checked_with_one_line_errors():
    good = tiny_benchmark(task_labels=True, class_ids_from_zero_in_each_exp=True)
    split = check_benchmark(good, name="tiny", n_tasks=2)
    assert (split.n_tasks, split.classes_per_task, split.input_shape) == (2, 2, (1, 2, 2))
    with pytest.raises(ValueError, match=r"benchmark 'tiny': train_stream\[1\] has task labels "
                                         r"\[0\], expected \[1\]"):
        check_benchmark(tiny_benchmark(task_labels=False), name="tiny")
    with pytest.raises(ValueError, match=r"train_stream\[1\] has classes \[2, 3\]; each task's "
                                         r"labels must be 0 .. c-1"):
        check_benchmark(tiny_benchmark(task_labels=True), name="tiny")
    with pytest.raises(ValueError, match=r"train_stream has 2 experiences, expected one per "
                                         r"task \(5\)"):
        check_benchmark(good, name="tiny", n_tasks=5)


@pytest.mark.slow  # 35 s: the audit's instruments run too; its --plugin path is the scripts' kit's
def test_the_audit_takes_a_plugin_method(tmp_path, capsys):
    code, stdout, err = run_cli("audit", [
        "--plugin", str(PLUGIN), "--methods", "l2_init,independent", "--seeds", "0", "1",
        "--shadows", "4", "--set", "epochs=1", "--set", "train_per_task=40", "--quiet",
        "--quick", "--permutations", "300", "--out", str(tmp_path / "out")], capsys)
    assert code == 0, err
    assert "| L2-init |" in stdout and "| Independent |" in stdout


def test_a_sweep_file_names_its_plugin(tmp_path):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({
        "program": "benchmarks/table1.py", "method": "grid",
        "parameters": {"plugin": {"value": str(PLUGIN)}, "methods": {"value": "l2_init"},
                       "seeds": {"values": [0, 1]}}}))
    commands = expand_sweep(sweep, wandb=False)
    assert [sorted(c[2:]) for c in commands] == [
        ["--methods=l2_init", f"--plugin={PLUGIN}", f"--seeds={s}"] for s in (0, 1)]


def test_an_installed_packages_entry_point_is_loaded(tmp_path):
    # a real installed distribution (a dist-info on the path), no mock of importlib.metadata
    (tmp_path / "my_methods").mkdir()
    (tmp_path / "my_methods" / "__init__.py").write_text(textwrap.dedent("""
        from pall_avalanche import Method, register_method
        register_method(Method("from_entry_point",
                               "pall_avalanche.strategies.sequential:Sequential",
                               exact=False, label="Entry point"))
    """))
    info = tmp_path / "my_methods-1.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-methods\nVersion: 1.2\n")
    (info / "entry_points.txt").write_text("[pall_avalanche.extensions]\nmine = my_methods\n")
    probe = ("import json, pall_avalanche.extensions as e; from pall_avalanche.catalog import "
             "METHOD_INFO; e.load_extensions([]); "
             "print(json.dumps([METHOD_INFO['from_entry_point'].label, e.provenance()]))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(tmp_path)},
                            timeout=60)
    assert result.returncode == 0, result.stderr
    label, provenance = json.loads(result.stdout)
    assert label == "Entry point"
    assert provenance == [{"extension": "my_methods", "entry_point": "mine",
                           "package": "my-methods", "version": "1.2"}]


def test_a_registered_model_is_built_by_name():
    def tiny(input_shape, width=3):
        return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, width)), width

    register_model("tiny_for_test", tiny)
    net = build_model("tiny_for_test", input_shape=(1, 8, 8), n_tasks=5, classes_per_task=2,
                      width=4)
    assert net.head.weight.shape == (10, 4)
    with pytest.raises(ValueError, match=r"model 'tiny_for_test' is already registered"):
        register_model("tiny_for_test", tiny)
    check_setting("model", "tiny_for_test", "--set model=tiny_for_test")


def test_registration_refuses_what_it_cannot_use():
    with pytest.raises(ValueError, match=r"a key's kind must be one of bool, int, float, str; "
                                         r"got <class 'list'> \(default \[1\]\)"):
        Key([1], "a list")
    with pytest.raises(ValueError, match=r"bounds need a numeric key; this one is str"):
        Key("a", "a string", low=0, high=1)
    with pytest.raises(ValueError, match=r"default 5.0: must be a number in \[0, 1\]"):
        Key(5.0, "outside its range", low=0, high=1)
    with pytest.raises(ValueError, match=r"a key whose default is None needs its kind"):
        Key(None, "no kind", nullable=True)
    with pytest.raises(ValueError, match=r"method 'bad_setting': settings\['k'\] = -1.0 must "
                                         r"be a number >= 0"):
        Method("bad_setting", "x:Y", exact=False, keys={"k": Key(1.0, "k", low=0)},
               settings={"k": -1.0})
    with pytest.raises(ValueError, match=r"key 'device' is a strategy argument"):
        register_method(Method("bad_key", "x:Y", exact=False, keys={"device": Key("cpu", "d")}))
    with pytest.raises(ValueError, match=r"register_method takes a pall_avalanche.catalog.Method "
                                         r"declaration, got 'bad_form'"):
        register_method("bad_form")
    assert not {"bad_setting", "bad_key", "bad_form"} & set(METHOD_INFO)


def test_run_experiments_takes_an_avalanche_benchmark_object(tmp_path):
    from pall_avalanche.config import for_benchmark
    from pall_avalanche.runs import run_experiments

    digits = plugin_module().digits_in_order(seed=0, n_tasks=5, root=None, train_per_task=None,
                                             download=False)
    config = {**for_benchmark("digits"), "benchmark": "my_object", "epochs": 1,
              "n_unlearn": 1}
    (record,) = run_experiments(["sequential"], [0], config, tmp_path, benchmark=digits,
                                show_progress=False)
    assert record["benchmark"] == record["split"]["name"] == "my_object"
    assert record["split"]["test_sizes"] == [len(e.dataset) for e in digits.test_stream]
    with pytest.raises(ValueError, match=r"jobs=2: a benchmark object runs in this process"):
        run_experiments(["sequential"], [0], config, tmp_path, benchmark=digits, jobs=2)
    with pytest.raises(ValueError, match=r"config\['benchmark'\] = 'digits' names a registered"):
        run_experiments(["sequential"], [0], {**config, "benchmark": "digits"}, tmp_path,
                        benchmark=digits)
    with pytest.raises(ValueError, match=r"n_unlearn=9 is invalid"):   # nothing ran: name free
        run_experiments(["sequential"], [0], {**config, "benchmark": "other", "n_unlearn": 9},
                        tmp_path, benchmark=digits)
    assert "other" not in BENCHMARK_INFO


def test_a_config_file_takes_what_it_leaves_out_from_its_benchmark_per_method_too(tmp_path):
    from pall_avalanche.cli import config_from_args, parse_run_arguments
    from pall_avalanche.config import CONFIG_DIR, check_run_config
    from pall_avalanche.paper.kit import script_parser

    shipped = yaml.safe_load((CONFIG_DIR / "cifar10.yaml").read_text())
    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump({"benchmark": "cifar10", "epochs": 1,
                                    "methods": {"er": {"lr": 0.002}}}))
    args = parse_run_arguments(script_parser("doc", name="t", default_methods=["er"]),
                               ["--config", str(mine), "--out", str(tmp_path / "out")])
    config, _, _ = config_from_args(args, CONFIG_DIR)
    assert config["epochs"] == 1 and config["batch_size"] == shipped["batch_size"]
    assert check_run_config(config, "er")["lr"] == 0.002                 # the file's own
    assert check_run_config(config, "derpp")["lr"] == shipped["methods"]["derpp"]["lr"]
    # a key nobody sets is at the method's declared default, with or without a methods: entry
    default = METHOD_INFO["gem"].keys["memory_strength"].default
    assert check_run_config(config, "gem")["memory_strength"] == default
    bare = {k: v for k, v in config.items() if k != "methods"}
    assert check_run_config(bare, "gem")["memory_strength"] == default
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("benchmark: nowhere\n")
    args.config = unknown
    with pytest.raises(ValueError, match=rf"{unknown}: benchmark \(the benchmark\) must be one "
                                         r"of .*, got 'nowhere'"):
        config_from_args(args, CONFIG_DIR)
