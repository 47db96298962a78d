"""Every W&B sweep file in benchmarks/sweeps parses, runs a real script and passes only flags
that script's parser accepts, for every grid value (as ``wandb agent`` would expand
``${args}`` to ``--name=value``)."""

import importlib.util
import itertools
import json
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SWEEPS = sorted((ROOT / "benchmarks" / "sweeps").glob("*.yaml"))


def script_parser(program: str):
    """The argparse parser the program builds (its ``main`` parses with it)."""
    import argparse

    spec = importlib.util.spec_from_file_location("swept_script", ROOT / program)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    captured = {}
    original = argparse.ArgumentParser.parse_args

    def capture(self, args=None, namespace=None):
        captured["parser"] = self
        raise SystemExit(0)

    argparse.ArgumentParser.parse_args = capture
    try:
        with pytest.raises(SystemExit):
            module.main([])
    finally:
        argparse.ArgumentParser.parse_args = original
    return captured["parser"]


def command_lines(sweep: dict) -> list[list[str]]:
    """The argument lists the agent runs: fixed command arguments plus ``--name=value``."""
    params = sweep["parameters"]
    names = list(params)
    grids = [params[n]["values"] if "values" in params[n] else [params[n]["value"]]
             for n in names]
    fixed = [a for a in sweep["command"] if not a.startswith("${")]
    assert sweep["command"][:3] == ["${env}", "${interpreter}", "${program}"]
    assert sweep["command"][-1] == "${args}"
    return [[*fixed, *(f"--{n}={v}" for n, v in zip(names, combo, strict=True))]
            for combo in itertools.product(*grids)]


def test_there_are_sweeps_for_every_swept_hyper_parameter():
    flags = set()
    for path in SWEEPS:
        flags |= set(yaml.safe_load(path.read_text())["parameters"])
    assert {"alpha", "n-unlearn", "n-retrain-iters", "buffer-size", "beta", "seeds"} <= flags


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.stem)
def test_sweep_parameters_are_flags_of_the_program(path):
    sweep = yaml.safe_load(path.read_text())
    assert sweep["method"] == "grid" and (ROOT / sweep["program"]).is_file()
    parser = script_parser(sweep["program"])
    dests = {a.dest for a in parser._actions}
    lines = command_lines(sweep)
    assert lines
    for argv in lines:
        args = parser.parse_args(argv)             # exits (SystemExit 2) on an unknown flag
        assert args.wandb and args.seeds and len(args.seeds) == 1
        for name in sweep["parameters"]:
            dest = name.replace("-", "_")
            assert dest in dests, f"{name} is not a flag of {sweep['program']}"
            value = getattr(args, dest)
            grid = sweep["parameters"][name]
            allowed = grid.get("values", [grid.get("value")])
            assert (value[0] if isinstance(value, list) else
                    str(value) if isinstance(value, Path) else value) in allowed


def test_swept_flags_reach_the_configuration():
    """--n-retrain-iters / --buffer-size / --beta / --alpha / --n-unlearn set config keys."""
    from pall_avalanche.cli import config_from_args
    from pall_avalanche.config import CONFIG_DIR

    parser = script_parser("benchmarks/table1.py")
    args = parser.parse_args(["--benchmark=cifar100", "--alpha=0.1", "--n-unlearn=5",
                              "--n-retrain-iters=25", "--buffer-size=1000", "--beta=0.0",
                              "--seeds=7"])
    config, seeds, _ = config_from_args(args, CONFIG_DIR)
    assert seeds == [7]
    assert (config["alpha"], config["n_unlearn"], config["n_retrain_iters"],
            config["buffer_size"], config["beta"]) == (0.1, 5, 25, 1000, 0.0)


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.stem)
def test_expansion_without_wandb_is_the_grid_the_file_defines(path, tmp_path):
    from pall_avalanche.sweeps import expand_sweep, main

    sweep = yaml.safe_load(path.read_text())
    expected = command_lines(sweep)
    assert expand_sweep(path) == [["python", sweep["program"], *argv] for argv in expected]
    assert expand_sweep(path, wandb=False) == [
        ["python", sweep["program"], *(a for a in argv if a != "--wandb")] for argv in expected]
    main([str(path), "--slurm", str(tmp_path / "array.sh")])
    script = (tmp_path / "array.sh").read_text()
    assert f"#SBATCH --array=0-{len(expected) - 1}" in script
    assert script.count("python benchmarks/") == len(expected)


def test_a_grid_prints_in_file_order_and_a_random_sweep_is_refused(tmp_path, capsys):
    from pall_avalanche.sweeps import main

    sweep = tmp_path / "tiny.yaml"
    sweep.write_text(yaml.safe_dump({
        "program": "benchmarks/table1.py", "method": "grid",
        "parameters": {"methods": {"value": "sequential"}, "seeds": {"values": [0, 1]},
                       "epochs": {"value": 1}, "out": {"value": str(tmp_path / "out")}},
        "command": ["${env}", "${interpreter}", "${program}", "--quiet", "--wandb", "${args}"]},
        sort_keys=False))
    main([str(sweep), "--no-wandb"])
    printed = capsys.readouterr().out.splitlines()
    assert printed == [f"python benchmarks/table1.py --quiet --methods=sequential --seeds={s} "
                       f"--epochs=1 --out={tmp_path / 'out'}" for s in (0, 1)]
    sweep.write_text(yaml.safe_dump({"program": "x.py", "method": "random", "parameters": {}}))
    with pytest.raises(ValueError, match="only grid sweeps"):
        main([str(sweep)])


def test_run_places_each_cuda_job_on_its_own_visible_gpu(tmp_path, monkeypatch, capsys):
    # every job is a real process recording the CUDA_VISIBLE_DEVICES it received and when it
    # ran; 2 slots over the 2 visible GPUs "3" and "5": concurrent cuda jobs never share one,
    # and jobs on the CPU or on an indexed device inherit the parent's value
    from pall_avalanche.sweeps import main

    program = tmp_path / "job.py"
    program.write_text(
        "import json, os, sys, time\n"
        "args = dict(a[2:].split('=', 1) for a in sys.argv[1:])\n"
        "start = time.time(); time.sleep(0.3)\n"
        "name = f\"{args['device']}-{args['job']}.json\"\n"
        "with open(os.path.join(args['folder'], name), 'w') as f:\n"
        "    json.dump({'gpu': os.environ.get('CUDA_VISIBLE_DEVICES'), 'start': start,\n"
        "               'end': time.time()}, f)\n")
    sweep = tmp_path / "gpus.yaml"
    sweep.write_text(yaml.safe_dump({
        "program": str(program), "method": "grid",
        "parameters": {"device": {"values": ["cuda", "cpu", "cuda:1"]},
                       "job": {"values": [0, 1, 2, 3]}},
        "command": ["${env}", "${interpreter}", "${program}", f"--folder={tmp_path}",
                    "${args}"]}, sort_keys=False))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    main([str(sweep), "--run", "--jobs", "2"])
    jobs = {p.stem: json.loads(p.read_text()) for p in tmp_path.glob("*-*.json")}
    assert len(jobs) == 12
    assert all(jobs[f"{d}-{j}"]["gpu"] == "3,5" for d in ("cpu", "cuda:1") for j in range(4))
    cuda = [jobs[f"cuda-{j}"] for j in range(4)]
    assert {job["gpu"] for job in cuda} == {"3", "5"}
    for a, b in itertools.combinations(cuda, 2):
        if a["start"] < b["end"] and b["start"] < a["end"]:      # ran at the same time
            assert a["gpu"] != b["gpu"]
    printed = capsys.readouterr().err
    assert printed.count("(GPU 3)") + printed.count("(GPU 5)") == 4


def test_job_slots_take_the_visible_gpus_round_robin():
    from pall_avalanche.sweeps import job_environment, trains_on_gpu

    cuda = ["python", "benchmarks/table1.py", "--device=cuda"]
    assert [job_environment(slot, ["0", "1", "2"], cuda) for slot in range(5)] == [
        {"CUDA_VISIBLE_DEVICES": g} for g in ("0", "1", "2", "0", "1")]
    assert job_environment(0, [], cuda) == {}                               # no GPU visible
    assert trains_on_gpu(["python", "x.py", "--device", "cuda"])
    assert not trains_on_gpu(["python", "x.py", "--device=cuda:0"])
    assert not trains_on_gpu(["python", "x.py", "--device", "cpu"])
    assert not trains_on_gpu(["python", "x.py"])                       # the scripts' default
