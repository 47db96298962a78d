"""Records on disk that cannot serve the run — damaged, NaN, of another run — are set aside
(named in one line) and computed again, never reused and never a traceback; reports skip
them and keep one record per run."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from helpers import benchmark_script

from pall_avalanche.files import RunWarning, load_record, write_record

FAST = ["--methods", "sequential", "--set", "epochs=1", "--set", "train_per_task=30",
        "--quiet", "--jobs", "1"]


def _table1(out: Path, *seeds: int) -> None:
    benchmark_script("table1").main([*FAST, "--seeds", *map(str, seeds), "--out", str(out)])


def _records(out: Path) -> dict[str, Path]:
    return {p.name: p for p in out.rglob("seed*.json")}


def _no_config(record: dict) -> dict:
    return {k: v for k, v in record.items() if k != "config"}


def _nan_metric(record: dict) -> str:
    text = json.dumps(record)
    return text.replace('"A_l": ', '"A_l": NaN, "was": ', 1)


def _no_format(record: dict) -> dict:
    return {k: v for k, v in record.items() if k != "format"}


def _text_metric(record: dict) -> dict:
    return {**record, "metrics": {**record["metrics"], "A_l": "high"}}


DAMAGE = {
    "no config": (_no_config, "not a complete record (no config)"),
    "NaN metric": (_nan_metric, "not valid JSON (NaN is not a number a record holds"),
    "no format": (_no_format, "a record without its format (a damaged file)"),
    "text metric": (_text_metric, "not a record (its metrics are not numbers)"),
    "deep nesting": (lambda record: "[" * 100_000 + "]" * 100_000, "not valid JSON ("),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_record_is_set_aside_and_computed_again(tmp_path, damage):
    _table1(tmp_path, 0)
    (path,) = _records(tmp_path).values()
    original = json.loads(path.read_text())
    change, reason = DAMAGE[damage]
    damaged = change(original)
    path.write_text(damaged if isinstance(damaged, str) else json.dumps(damaged))
    with pytest.warns(RunWarning, match=rf"seed0.json: {re.escape(reason)}"
                                        r".*set aside as seed0.json.corrupt, computing the "
                                        r"record again"):
        _table1(tmp_path, 0)
    again = json.loads(path.read_text())
    assert again["metrics"] == original["metrics"] and again["accuracy"] == original["accuracy"]
    assert (path.parent / "seed0.json.corrupt").is_file()


def test_a_record_copied_into_another_records_folder_is_not_trusted(tmp_path):
    _table1(tmp_path, 0, 1)
    records = _records(tmp_path)
    seed1 = json.loads(records["seed1.json"].read_text())
    records["seed1.json"].write_text(records["seed0.json"].read_text())
    with pytest.warns(RunWarning, match=r"seed1.json: the record of another run \(method "
                                        r"sequential, seed 0, .*set aside"):
        _table1(tmp_path, 0, 1)
    again = json.loads(records["seed1.json"].read_text())
    assert again["seed"] == 1 and again["metrics"] == seed1["metrics"]


def test_reports_skip_damaged_records_and_keep_the_newest_of_one_run(tmp_path, capsys):
    from pall_avalanche.reports import load_records
    from pall_avalanche.reports.command import main as report

    _table1(tmp_path, 0, 1)
    records = _records(tmp_path)
    records["seed1.json"].write_text(_nan_metric(json.loads(records["seed1.json"].read_text())))
    # the same run written by older code: another identity folder, an older finish time
    older = json.loads(records["seed0.json"].read_text())
    older.update(config_hash="0" * 10, finished_at="2000-01-01T00:00:00+00:00",
                 metrics={**older["metrics"], "A_l": 1.0})
    old_path = records["seed0.json"].parent.parent / ("0" * 10) / "seed0.json"
    old_path.parent.mkdir()
    old_path.write_text(json.dumps(older))
    with pytest.warns(RunWarning) as caught:
        loaded = load_records(tmp_path)
    messages = [str(w.message) for w in caught]
    assert any(m.startswith(f"skipped {records['seed1.json']}: not valid JSON") for m in messages)
    assert any(m.startswith(f"1 record(s) of older code left out, e.g. {old_path}")
               for m in messages)
    assert [(r["seed"], r["metrics"]["A_l"]) for r in loaded] == [
        (0, json.loads(records["seed0.json"].read_text())["metrics"]["A_l"])]
    assert not math.isclose(loaded[0]["metrics"]["A_l"], 1.0)
    with pytest.warns(RunWarning):
        markdown = report([str(tmp_path), "--out", str(tmp_path / "rep" / "r")])
    (row,) = [line for line in markdown.splitlines() if line.startswith("| digits |")]
    assert row.endswith("| 1 |")                  # one seed: seed 0's newest record alone


def test_a_record_is_written_only_when_it_can_be_read_back(tmp_path):
    """``write_record`` refuses what ``load_record`` would refuse, and what it writes reads
    back equal."""
    record = {"method": "sequential", "seed": 0, "requests": [{"kind": "learn", "task": 0}],
              "accuracy": [[97.5, 0.0]], "metrics": {"A_l": 97.5, "A_u": None},
              "config": {"benchmark": "digits"}}
    write_record(tmp_path / "ok.json", record)
    assert load_record(tmp_path / "ok.json") == record
    with pytest.raises(ValueError, match=r"refusing to write .*no\.json: not a complete record "
                                         r"\(no config\)"):
        write_record(tmp_path / "no.json", {k: v for k, v in record.items() if k != "config"})
    with pytest.raises(ValueError, match="Out of range float values"):
        write_record(tmp_path / "nan.json", {**record, "metrics": {"A_l": math.nan}})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ok.json"]
