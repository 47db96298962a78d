"""benchmarks/table1.py end to end on digits and on CIFAR-10 files: records, the paper's
layout (PALL once per α), replay, resume, bad input."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from helpers import benchmark_script

from pall_avalanche.checkpoint import load_checkpoint
from pall_avalanche.config import apply_overrides, for_benchmark, resolve_method_config
from pall_avalanche.data.synthetic import write_cifar10
from pall_avalanche.files import read_record
from pall_avalanche.runs import record_path
from pall_avalanche.runs.store import RECORD_FORMAT
from pall_avalanche.strategies import TABLE1_ALPHAS, TABLE1_METHODS

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "table1.py"
FAST = ["--set", "epochs=1", "--set", "train_per_task=40", "--quiet"]
REQUIRED = {"method", "seed", "benchmark", "requests", "accuracy", "metrics", "timings",
            "model_size_mb", "config", "versions"}


def run_main(args, capsys):
    """Run the script's guarded main in-process; return (exit code, stdout, stderr)."""
    table1 = benchmark_script("table1")
    with pytest.raises(SystemExit) as exit_info:
        table1.cli(args)
    out = capsys.readouterr()
    return exit_info.value.code, out.out, out.err


def records_in(folder: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(folder.rglob("*.json"))]


def test_table_records_and_resume(tmp_path, capsys):
    args = ["--methods", "sequential,independent", "--seeds", "0", "1", "--out",
            str(tmp_path / "out"), "--report-dir", str(tmp_path / "rep"), *FAST]
    code, out, _ = run_main(args, capsys)
    assert code == 0
    assert "| Sequential |" in out and "| Independent | " in out and "*Exact*" in out
    records = records_in(tmp_path / "out")
    assert len(records) == 4
    for record in records:
        assert set(record) >= REQUIRED
        r, t = len(record["requests"]), record["config"]["n_tasks"]
        assert len(record["accuracy"]) == r and all(len(row) == t for row in record["accuracy"])
        assert set(record["metrics"]) == {"A_l", "A_u", "F_l", "F_u", "F_u_max"}
        assert record["config"]["epochs"] == 1 and record["config"]["train_per_task"] == 40
    independent = [r for r in records if r["method"] == "independent"]
    assert all(r["metrics"]["F_l"] == 0.0 and r["metrics"]["F_u"] == 0.0 for r in independent)
    md = (tmp_path / "rep" / "table1_digits.md").read_text()
    assert "Command: `python benchmarks/table1.py --methods sequential,independent" in md
    csv = (tmp_path / "rep" / "table1_digits.csv").read_text().splitlines()
    assert csv[0].startswith("method,benchmark,alpha,row,exact,seeds,A_l_mean")
    assert len(csv) == 3
    assert (tmp_path / "rep" / "table1_digits.png").stat().st_size > 1000   # the figure
    assert "Figure: table1_digits.png" in md

    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / "out").rglob("*.json")}
    code, out2, _ = run_main(args, capsys)
    assert code == 0 and out2 == out                          # same table from stored records
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "out").rglob("*.json")} == stamps


def test_requests_file_is_replayed_for_every_seed(tmp_path, capsys):
    sequence = [{"kind": "learn", "task": 0}, {"kind": "learn", "task": 1},
                {"kind": "unlearn", "task": 0}, {"kind": "learn", "task": 2}]
    (tmp_path / "r.json").write_text(json.dumps(sequence))
    code, _, _ = run_main(["--methods", "sequential", "--seeds", "3", "4", "--requests",
                           str(tmp_path / "r.json"), "--out", str(tmp_path / "out"),
                           "--report-dir", str(tmp_path / "rep"), *FAST], capsys)
    assert code == 0
    records = records_in(tmp_path / "out")
    assert [r["seed"] for r in records] == [3, 4]
    assert all(r["requests"] == sequence for r in records)
    assert all(len(r["accuracy"]) == 4 for r in records)
    # N_u comes from the replayed sequence (one unlearning), not the configuration's 3.
    assert all(r["config"]["n_unlearn"] == 1 for r in records)
    # Moving the data keeps the records: a rerun with another --data-root reuses them.
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "out").rglob("*.json")}
    code, _, _ = run_main(["--methods", "sequential", "--seeds", "3", "4", "--requests",
                           str(tmp_path / "r.json"), "--out", str(tmp_path / "out"),
                           "--data-root", str(tmp_path / "elsewhere"),
                           "--report-dir", str(tmp_path / "rep"), *FAST], capsys)
    assert code == 0
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "out").rglob("*.json")} == before
    # the same sequence written out, in this project's form (UnCLe's commas) and in CLPU's
    # notation, is the same run: every record reused
    for text in ("L0,L1,U0,L2", "clpu:T0 T1 F0 T2"):
        code, _, _ = run_main(["--methods", "sequential", "--seeds", "3", "4", "--requests",
                               text, "--out", str(tmp_path / "out"),
                               "--report-dir", str(tmp_path / "rep"), *FAST], capsys)
        assert code == 0
        assert {p: p.stat().st_mtime_ns for p in (tmp_path / "out").rglob("*.json")} == before


NO_CUDA = pytest.mark.skipif(
    torch.cuda.is_available(),
    reason="this machine has a CUDA GPU, so --device cuda is valid here and there is no "
           "refusal to check (the case runs on machines without CUDA, e.g. CI)")


@pytest.mark.parametrize("args, message", [
    (["--methods", "sequential,magic"], "unknown method(s) ['magic']"),
    (["--benchmark", "mnist"], "--benchmark mnist: unknown benchmark; valid: digits, cifar10, "),
    (["--requests", "<BAD>"], "request 2 (U1): task 1 is unlearned before it was learned"),
    (["--requests", "<EMPTY>"], "--requests <EMPTY>: the list holds no request"),
    (["--requests", "clpu:R0 F0"], "--requests request 2 (U0): task 0 is permanent since "
                                   "request 1; a permanent task cannot be unlearned"),
    (["--requests", "missing.json"], "--requests missing.json: no such file, and not a "
                                     "sequence such as 'L0 L1 U0'"),
    (["--n-unlearn", "9"], "n_unlearn=9 is invalid for 'sequential': at most n_tasks=5"),
    (["--set", "shadow_task=1"], "shadow_task and shadow_seed go together: set both"),
    (["--set", "shadow_task=7", "--set", "shadow_seed=0"],
     "shadow_task=7 is invalid: the tasks are 0..4"),
    (["--set", "optimizer=rmsprop"],
     "--set optimizer=rmsprop: optimizer (the optimizer) must be one of sgd, adam, got 'rmsprop'"),
    (["--set", "alhpa=0.05"], "--set alhpa=0.05: unknown configuration key 'alhpa'; did you "
                              "mean 'alpha'?"),
    (["--set", "foo=1"], "--set foo=1: unknown configuration key 'foo'; known keys: alpha, "),
    (["--set", "methods.pall.bogus=1"], "--set methods.pall.bogus=1: unknown configuration "
                                        "key 'bogus'"),
    (["--set", "methods.pal.lr=1"], "unknown method 'pal' in 'methods.pal.lr'; did you mean "
                                    "'pall'?"),
    (["--epochs", "0"], "--epochs 0: epochs (epochs per learning request) must be >= 1, got 0"),
    (["--epochs", "-3"], "--epochs -3: epochs (epochs per learning request) must be >= 1"),
    pytest.param(["--device", "cuda"], "--device cuda: CUDA is not available on this machine",
                 marks=NO_CUDA),
    (["--device", "gpu"], "--device gpu: not a torch device; valid: cpu, cuda"),
    (["--set", "alpha=nan"], "--set alpha=nan: alpha (α, per-layer connectivity of a task "
                             "subnetwork) must be a number in (0, 1], got 'nan'"),
    (["--set", "alpha=abc"], "must be a number in (0, 1], got 'abc'"),
    (["--config", "<YAML>"], "--config <YAML>: not valid YAML at line 3, column 1"),
    (["--set", "batch_size=0"], "--set batch_size=0: batch_size (training mini-batch size) "
                                "must be >= 1, got 0"),
    (["--set", "epochs=2.5"], "--set epochs=2.5: epochs (epochs per learning request) must be "
                              "an integer >= 1, got 2.5"),
    (["--set", "lr=abc"], "--set lr=abc: lr (learning rate) must be a number > 0, got 'abc'"),
    (["--set", "methods=3"], "--set methods=3: methods (per-method overrides: "
                             "methods.<method>.<key>) must be a mapping, got 3"),
    (["--seeds", "-1"], "argument --seeds: '-1' is invalid; give an integer >= 0"),
    (["--methods", "sequential,pall", "--set", "alpha=0"],
     "--set alpha=0: alpha (α, per-layer connectivity of a task subnetwork) must "
     "be in (0, 1], got 0"),
    (["--methods", "sequential,pall", "--set", "methods.pall.buffer_size=3"],
     "buffer_size=3 is invalid for 'pall': it gives 0 samples per task over 5 tasks"),
    (["--out", "<FILE>/x"], "--out <FILE>/x: cannot write there (Not a directory)"),
    (["--report-dir", "<FILE>/y"], "--report-dir <FILE>/y: cannot write there (Not a directory)"),
])
def test_bad_input_fails_with_one_line(tmp_path, capsys, args, message):
    """Each bad input: exit code 2, one line naming the option, the value and what is valid,
    and nothing trained (no record, no checkpoint)."""
    files = {"<BAD>": tmp_path / "bad.json", "<EMPTY>": tmp_path / "empty.json",
             "<YAML>": tmp_path / "bad.yaml", "<FILE>": tmp_path / "a_file"}
    files["<BAD>"].write_text('[{"kind": "learn", "task": 0}, {"kind": "unlearn", "task": 1}]')
    files["<EMPTY>"].write_text("[]")
    files["<YAML>"].write_text("epochs: 1\nlr: [0.1\n")
    files["<FILE>"].write_text("")

    def real(text: str) -> str:
        for name, path in files.items():
            text = text.replace(name, str(path))
        return text

    args, message = [real(a) for a in args], real(message)
    defaults = {"--methods": ["sequential"], "--seeds": ["0"], "--out": [str(tmp_path / "out")]}
    for flag, value in defaults.items():
        if flag not in args:
            args += [flag, *value]
    code, _, err = run_main([*args, *FAST], capsys)
    assert code == 2
    assert err.count("\n") == 1 and message in err and err.startswith("table1.py: error: ")
    assert not [p for p in tmp_path.rglob("*") if p.suffix in (".json", ".ckpt")
                and p not in files.values()]


@pytest.mark.slow   # the in-process resume tests (test_checkpoint.py) cover every method
def test_killed_run_resumes_without_recomputing_or_corruption(tmp_path):
    out = tmp_path / "out"
    cmd = [sys.executable, str(SCRIPT), "--methods", "sequential,independent", "--seeds", "0",
           "1", "2", "--out", str(out), "--report-dir", str(tmp_path / "rep"), "--set",
           "epochs=3", "--quiet"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline and len(list(out.rglob("*.json"))) < 2:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    finished = {p: p.read_bytes() for p in out.rglob("*.json")}
    assert 2 <= len(finished) < 6, "the run must be killed part-way"
    assert all(read_record(p) is not None for p in finished)       # no corrupt record
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert len(list(out.rglob("*.json"))) == 6
    for path, content in finished.items():
        assert path.read_bytes() == content                       # not recomputed


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_diverged_run_fails_with_one_line_and_keeps_its_checkpoint(tmp_path, capsys, jobs):
    """lr = 1000 on digits: a later learning request's loss turns NaN. The grid's only run:
    exit code 1, one error line naming method, seed, request and epoch, no record, and the
    checkpoint of the last finished request left for a rerun (in a worker process too).
    (With other runs beside it, they finish: tests/hardening/test_grids.py.)"""
    out = tmp_path / "out"
    code, _, err = run_main(["--methods", "sequential", "--seeds", "0", "--set", "lr=1000",
                             "--out", str(out), "--jobs", jobs, *FAST], capsys)
    assert code == 1
    errors = [line for line in err.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0] == err.splitlines()[-1]
    found = re.fullmatch(r"table1\.py: error: every run diverged, no record to report: "
                         r"sequential seed 0: request (\d+) \((learn|unlearn) task "
                         r"(\d+)\) diverged in epoch 1: the training loss is not finite \(NaN "
                         r"or infinite\)", errors[0])
    assert found, errors[0]
    index = int(found[1])
    assert index >= 1, "the first request must finish for a checkpoint to be kept"
    assert list(out.rglob("*.json")) == []
    (checkpoint,) = out.rglob("seed0.ckpt")
    state = load_checkpoint(checkpoint)
    assert state["requests_done"] == index and state["method"] == "sequential"
    assert state["requests"][index] == {"kind": found[2], "task": int(found[3])}
    assert not list(out.rglob("*.lock"))


def test_records_of_another_format_are_not_reused(tmp_path, capsys):
    args = ["--methods", "sequential", "--seeds", "0", "--out", str(tmp_path / "out"),
            "--report-dir", str(tmp_path / "rep"), *FAST]
    assert run_main(args, capsys)[0] == 0
    (path,) = (tmp_path / "out").rglob("seed0.json")
    older = RECORD_FORMAT - 1                                                   # older code
    path.write_text(json.dumps({**json.loads(path.read_text()), "format": older}))
    code, _, err = run_main(args, capsys)
    assert code == 2 and f"has record format {older}; this version writes format " \
        f"{RECORD_FORMAT}" in err


def table_rows(markdown: str) -> list[list[str]]:
    """The cells of a report's Markdown table, header and separator left out."""
    lines = [line for line in markdown.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines[1:]]


def test_cifar10_files_end_to_end_in_the_papers_layout(tmp_path, capsys):
    """Table 1 on a small CIFAR-10 in the official file layout: PALL once per α of Table 1,
    every other method once (WSN at the configuration's α = 1/T); a command-line α gives one
    PALL row, from the record already there."""
    write_cifar10(tmp_path / "data", train_per_class=4, test_per_class=2)
    args = ["--benchmark", "cifar10", "--data-root", str(tmp_path / "data"), "--epochs", "1",
            "--seeds", "0", "--train-per-task", "4", "--n-retrain-iters", "2",
            "--set", "model=cnn", "--out", str(tmp_path / "out"),
            "--report-dir", str(tmp_path / "rep"), "--quiet"]
    code, out, err = run_main(args, capsys)
    assert code == 0, err
    md = (tmp_path / "rep" / "table1_cifar10.md").read_text()
    assert out.strip() == md.strip()
    labels = [row[0] for row in table_rows(md)]
    pall = [f"PALL (α={a:g})" for a in TABLE1_ALPHAS]
    assert labels == ["Sequential", "EWC", "LwF", "LSF", "GEM", "ER", "DER++", "PackNet",
                      "WSN", *pall, "Independent"]
    assert "PALL α = 0.05, 0.1, 0.2" in md and "WSN: α = 0.2" in md
    records = records_in(tmp_path / "out")
    assert len(records) == len(TABLE1_METHODS) + 2
    assert {r["benchmark"] for r in records} == {"cifar10"}
    assert sorted(r["config"]["alpha"] for r in records if r["method"] == "pall") == [
        0.05, 0.1, 0.2]
    # α is a key of PALL and WSN only: WSN at the configuration's 1/T, nobody else has one
    assert [r["config"]["alpha"] for r in records if r["method"] == "wsn"] == [0.2]
    assert not any("alpha" in r["config"] for r in records if r["method"] not in ("pall", "wsn"))
    assert all(r["config"]["model"] == "cnn" and r["split"]["input_shape"] == [3, 32, 32]
               for r in records)
    csv = (tmp_path / "rep" / "table1_cifar10.csv").read_text().splitlines()
    assert csv[0].startswith("method,benchmark,alpha,row,exact,seeds,A_l_mean")
    assert [line.split(",")[3] for line in csv[1:]] == labels

    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / "out").rglob("*.json")}
    code, _, err = run_main([*args, "--set", "methods.pall.alpha=0.1"], capsys)
    assert code == 0, err
    md = (tmp_path / "rep" / "table1_cifar10.md").read_text()
    assert [row[0] for row in table_rows(md)] == [*labels[:9], "PALL (α=0.1)", "Independent"]
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "out").rglob("*.json")} == stamps


def test_table1_alphas_match_the_alpha_sweep():
    """The sweep's PALL records (--alpha A) are the ones table1.py reuses (PALL's α alone)."""
    sweep = yaml.safe_load((ROOT / "benchmarks" / "sweeps" / "table1_alpha.yaml").read_text())
    assert sweep["program"] == "benchmarks/table1.py"
    assert tuple(sweep["parameters"]["alpha"]["values"]) == TABLE1_ALPHAS
    for benchmark in sweep["parameters"]["benchmark"]["values"]:
        config = for_benchmark(benchmark)
        assert resolve_method_config(config, "pall")["alpha"] == 1 / config["n_tasks"]
        for alpha in TABLE1_ALPHAS:
            assert (record_path("out", "pall", 0, apply_overrides(config, [("alpha", alpha)]))
                    == record_path("out", "pall", 0, apply_overrides(
                        config, [("methods.pall.alpha", alpha)])))


def test_reports_go_beside_the_records_unless_a_report_dir_is_given(tmp_path, capsys,
                                                                    monkeypatch):
    monkeypatch.chdir(tmp_path)              # a checkout's committed reports/ would be here
    (tmp_path / "reports").mkdir()
    committed = tmp_path / "reports" / "table1_digits.md"
    committed.write_text("the committed table\n")
    code, _, _ = run_main(["--methods", "sequential", "--seeds", "0", "--out", "out", *FAST],
                          capsys)
    assert code == 0
    assert committed.read_text() == "the committed table\n"
    assert (tmp_path / "out" / "table1_digits.md").read_text().startswith("# Table 1")
    assert {p.name for p in (tmp_path / "reports").iterdir()} == {"table1_digits.md"}


def test_a_log_gets_plain_progress_lines_and_a_closing_summary(tmp_path, capsys):
    # stderr is not a terminal under pytest: no bars, no escape codes, one line per record
    code, _, err = run_main(["--methods", "sequential,independent", "--seeds", "0", "--out",
                             str(tmp_path / "out"), *[a for a in FAST if a != "--quiet"]],
                            capsys)
    assert code == 0 and "\r" not in err and "\x1b" not in err
    lines = err.splitlines()
    assert "runs: 1/2 sequential seed 0 done" in lines[0]
    assert "runs: 2/2 independent seed 0 done" in lines[1]
    assert lines[-1].startswith("ran 2, reused 0 records; best A_l ")
    code, _, err = run_main(["--methods", "sequential,independent", "--seeds", "0", "--out",
                             str(tmp_path / "out"), *FAST], capsys)
    assert err.splitlines()[-1].startswith("ran 0, reused 2 records")


def _seconds(text: str) -> int:
    minutes, _, seconds = text.rpartition(" min ")
    return int(minutes or 0) * 60 + int(seconds.removesuffix(" s"))


def test_quiet_keeps_progress_with_the_time_left_and_names_each_runs_setting(
        tmp_path, capsys, monkeypatch, recwarn):
    """``--quiet`` drops the bars and the per-request lines, not the progress: one line per
    finished run with the time so far and the time left (the mean time per run so far times
    the runs left); PALL's three α are told apart there and in the learning check's warning
    (every check made to fail here, to see its warning)."""
    from pall_avalanche.evaluation import measurement

    monkeypatch.setattr(measurement, "learning_failed", lambda *args: True)
    code, _, err = run_main(["--methods", "sequential,pall", "--seeds", "0", "--out",
                             str(tmp_path / "out"), *FAST], capsys)
    assert code == 0
    progress = re.findall(r"^runs: (\d)/4 (.+?) done \((.+?)(?:; about (.+) left)?\)$", err,
                          re.M)
    assert [(count, name) for count, name, *_ in progress] == [
        ("1", "sequential seed 0"), ("2", "pall alpha=0.05 seed 0"),
        ("3", "pall alpha=0.1 seed 0"), ("4", "pall alpha=0.2 seed 0")]
    for count, _, elapsed, left in progress[:-1]:
        expected = _seconds(elapsed) / int(count) * (4 - int(count))
        assert abs(_seconds(left) - expected) <= 0.5 + (4 - int(count)) * 0.5 / int(count)
    assert progress[-1][3] == ""                      # nothing left after the last run
    warned = {str(w.message).partition(": learning request ")[0]
              for w in recwarn if isinstance(w.message, measurement.LearningWarning)}
    assert warned == {"sequential seed 0", "pall alpha=0.05 seed 0", "pall alpha=0.1 seed 0",
                      "pall alpha=0.2 seed 0"}


def test_a_paper_benchmark_at_full_size_on_the_cpu_says_why_it_is_slow(tmp_path, capsys,
                                                                      recwarn):
    """Before anything trains: one warning naming the benchmark, the runs and the fixes; not
    for a reduced run (--train-per-task)."""
    write_cifar10(tmp_path / "data", train_per_class=4, test_per_class=2)
    args = ["--benchmark", "cifar10", "--data-root", str(tmp_path / "data"), "--epochs", "1",
            "--seeds", "0", "--methods", "sequential", "--set", "model=cnn", "--quiet"]
    code, _, err = run_main([*args, "--out", str(tmp_path / "full")], capsys)
    assert code == 0, err
    slow = [str(w.message) for w in recwarn if "at full size on the CPU" in str(w.message)]
    assert slow == ["cifar10 at full size on the CPU: 1 run(s), each training its "
                    "configuration's epochs on every task's whole training set, hours per run "
                    "here; use --device cuda, or --train-per-task N and --epochs E for a "
                    "reduced run"]
    recwarn.clear()
    code, _, err = run_main([*args, "--train-per-task", "4", "--out", str(tmp_path / "part")],
                            capsys)
    assert code == 0, err
    assert not [w for w in recwarn if "at full size" in str(w.message)]
