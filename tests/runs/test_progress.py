"""What a batch of runs prints as it goes: names that tell a method's settings apart, and an
overall count across a script's stages with the time left."""

from __future__ import annotations

import re

from helpers import FAST_CONFIG, seq

from pall_avalanche.runs.batch import run_specs
from pall_avalanche.runs.progress import (
    OverallProgress,
    distinguishing_keys,
    duration,
    run_name,
)
from pall_avalanche.runs.spec import plan

CONFIG = {**FAST_CONFIG, "epochs": 1, "train_per_task": 30}
REQUESTS = seq("L0 L1 U0")


def test_names_tell_a_methods_settings_apart():
    specs = [*plan(["pall"], [0], {**CONFIG, "alpha": 0.1}, requests=REQUESTS),
             *plan(["pall"], [0], {**CONFIG, "alpha": 0.2}, requests=REQUESTS),
             *plan(["sequential"], [0, 1], CONFIG, requests=REQUESTS)]
    keys = distinguishing_keys(specs)
    assert keys == {"pall": ["alpha"], "sequential": []}
    assert [run_name(s, keys[s.method]) for s in specs] == [
        "pall alpha=0.1 seed 0", "pall alpha=0.2 seed 0", "sequential seed 0",
        "sequential seed 1"]


def test_durations_read_as_a_person_would_say_them():
    assert [duration(s) for s in (4.4, 59.6, 185, 7500)] == [
        "4 s", "1 min 0 s", "3 min 5 s", "2 h 05 min"]


def test_the_overall_count_spans_stages_and_counts_reused_records_at_once(tmp_path, capsys):
    stages = [plan(["sequential"], [0, 1], CONFIG, requests=REQUESTS),
              plan(["sequential"], [2], CONFIG, requests=REQUESTS)]
    overall = OverallProgress(3)
    for i, specs in enumerate(stages):
        run_specs(specs, tmp_path / str(i), group="g", checkpoints=False, show_progress=False,
                  overall=overall)
    lines = capsys.readouterr().err.splitlines()
    counts = [re.search(r"; overall (\d)/3", line)[1] for line in lines]
    # each stage's last line always; between them at most one per 30 s (these take seconds)
    assert counts == ["2", "3"] and "about" in lines[0].split("; overall")[1]
    assert lines[-1].endswith("; overall 3/3)")
    # again: the first stage's two records are reused, counted before anything runs
    again = OverallProgress(3)
    run_specs(stages[0], tmp_path / "0", group="g", checkpoints=False, show_progress=False,
              overall=again)
    assert (again.counted, again.computed) == (2, 0) and again.describe() == "overall 2/3"
