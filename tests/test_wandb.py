"""W&B logging: a real offline run of benchmarks/table1.py on digits, read back from the run
files on disk; a broken W&B (online without credentials, unreachable server) never costs the
record; without --wandb no W&B run exists."""

import json
import warnings
from pathlib import Path

import pytest
from helpers import benchmark_script
from wandb_offline import read_offline_run

from pall_avalanche.runs import wandb_logging
from pall_avalanche.runs.wandb_logging import WandbSettings

FAST = ["--seeds", "0", "--set", "epochs=1", "--set", "train_per_task=40", "--quiet"]


@pytest.fixture(autouse=True)
def wandb_env(tmp_path, monkeypatch):
    """Offline W&B writing under tmp_path; a fresh 'W&B failed' flag per test."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_SWEEP_ID", raising=False)
    monkeypatch.setattr(wandb_logging, "_DISABLED", [])


def table1(args, tmp_path):
    module = benchmark_script("table1")
    with pytest.raises(SystemExit) as exit_info:
        module.cli([*args, "--out", str(tmp_path / "out"), "--report-dir",
                    str(tmp_path / "rep"), *FAST])
    records = {r["method"]: r for r in
               (json.loads(p.read_text()) for p in (tmp_path / "out").rglob("*.json"))}
    return exit_info.value.code, records


def offline_runs(tmp_path) -> dict[str, tuple[Path, dict]]:
    runs = {run["name"]: (folder, run) for folder in sorted(tmp_path.glob("wandb/offline-run-*"))
            for run in [read_offline_run(folder)]}
    assert all(run["complete"] for _, run in runs.values())
    return runs


def test_offline_table1_run_logs_requests_record_and_table(tmp_path):
    code, records = table1(["--methods", "sequential,pall", "--alpha", "0.2", "--wandb",
                            "--wandb-tags", "a,b", "--wandb-group", "grp"], tmp_path)
    assert code == 0 and set(records) == {"sequential", "pall"}
    runs = offline_runs(tmp_path)
    names = {m: f"{m}-seed0-{r['config_hash']}" for m, r in records.items()}
    assert set(runs) == {*names.values(), "table1_digits"}
    for method, record in records.items():
        folder, run = runs[names[method]]
        assert (run["group"], run["job_type"], run["tags"]) == ("grp", "record", ["a", "b"])
        assert run["config"] == {"_wandb": {}, **record["config"], "method": method, "seed": 0}
        rows = {row["_step"]: row for row in run["history"]}
        n = len(record["requests"])
        assert sorted(rows) == list(range(n + 1))          # one step per request + the record
        for i, (request, accuracy) in enumerate(zip(record["requests"], record["accuracy"],
                                                    strict=True)):
            row = rows[i]
            assert (row["request/kind"], row["request/task"]) == (request["kind"],
                                                                  request["task"])
            assert [row[f"accuracy/task{t}"] for t in range(5)] == accuracy
            assert row["time/seconds"] == record["timings"]["per_request"][i]["seconds"]
            assert row["model_size_mb"] == record["model_size_mb_per_request"][i]
        unlearn_rows = [rows[i] for i, r in enumerate(record["requests"]) if r["kind"] == "unlearn"]
        if method == "pall":                               # PALL's Table A2 statistics, live
            assert [r["unlearning/redrawn"] for r in unlearn_rows] == [
                s["redrawn"] for s in record["unlearning_stats"]]
        summary = run["summary"]
        for name, value in record["metrics"].items():
            assert summary[f"metrics/{name}"] == value
        assert summary["model_size_mb"] == record["model_size_mb"]
        assert summary["exact"] == record["exact"]
        assert summary["time/learn_seconds_per_epoch"] == (
            record["timings"]["learn_seconds_per_epoch"])
        table = json.loads((folder / "files" / rows[n]["accuracy_matrix/path"]).read_text())
        assert [row[3:] for row in table["data"]] == record["accuracy"]
        assert table["columns"][:3] == ["request", "kind", "task"]
        heatmap = folder / "files" / rows[n]["accuracy_heatmap/path"]
        assert heatmap.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    folder, run = runs["table1_digits"]
    assert (run["group"], run["job_type"]) == ("grp", "table")
    table = json.loads((folder / "files" / run["summary"]["table1_digits/path"]).read_text())
    column = table["columns"].index("A_l_mean")
    by_method = {row[0]: row for row in table["data"]}
    assert by_method["pall"][column] == records["pall"]["metrics"]["A_l"]  # one seed: the mean
    assert "Command: `python benchmarks/table1.py" in run["summary"]["markdown"]


def test_without_flag_no_wandb_run_is_created(tmp_path):
    import wandb

    code, records = table1(["--methods", "sequential"], tmp_path)
    assert code == 0 and len(records) == 1
    assert not (tmp_path / "wandb").exists() and wandb.run is None


def test_online_without_credentials_still_writes_the_record(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))     # no ~/.netrc credentials
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code, records = table1(["--methods", "sequential,independent", "--wandb",
                                "--wandb-mode", "online"], tmp_path)
    assert code == 0 and set(records) == {"sequential", "independent"}
    messages = [str(w.message) for w in caught if "W&B" in str(w.message)]
    assert len(messages) == 1 and "results are still written" in messages[0]   # warned once
    assert "init" in wandb_logging.wandb_disabled_reason()
    assert (tmp_path / "rep" / "table1_digits.md").is_file()


def test_unreachable_server_still_writes_the_record(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "0" * 40)
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")   # nothing listens there
    monkeypatch.setenv("WANDB_INIT_TIMEOUT", "3")
    with pytest.warns(RuntimeWarning, match="W&B init failed"):
        code, records = table1(["--methods", "sequential", "--wandb", "--wandb-mode", "online"],
                               tmp_path)
    assert code == 0 and records["sequential"]["metrics"]["A_l"] > 0


def test_settings_validation_and_flags():
    with pytest.raises(ValueError, match="W&B mode 'bogus' is invalid; valid modes are online"):
        WandbSettings(mode="bogus")
    import argparse

    parser = argparse.ArgumentParser()
    wandb_logging.add_wandb_arguments(parser)
    assert WandbSettings.from_args(parser.parse_args([])) is None
    settings = WandbSettings.from_args(parser.parse_args(
        ["--wandb", "--wandb-tags", "x, y,", "--wandb-mode", "disabled", "--wandb-entity", "e"]))
    assert settings == WandbSettings(entity="e", tags=("x", "y"), mode="disabled")


def test_reader_handles_records_spanning_blocks(tmp_path):
    """A run file over several 32 KiB blocks (records split into first/middle/last chunks)."""
    run = wandb_logging.WandbRun(WandbSettings(mode="offline"), name="big", job_type="test",
                                 config={"k": "v"})
    text = "x" * 50_000
    for step in range(4):
        run.log({"text": f"{step}{text}", "n": step}, step=step)
    run.finish()
    (folder,) = tmp_path.glob("wandb/offline-run-*")
    assert next(folder.glob("run-*.wandb")).stat().st_size > 3 * 32768
    read = read_offline_run(folder)
    assert read["complete"]
    assert [(r["n"], r["text"]) for r in read["history"]] == [
        (s, f"{s}{text}") for s in range(4)]
    assert read["config"]["k"] == "v" and read["name"] == "big"
