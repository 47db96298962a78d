"""``perf_runs.py``: the phases of a real profiled run add up and land where the work is; the
baseline option refuses what is not a commit."""

from __future__ import annotations

import cProfile
import pstats

import pytest

from pall_avalanche.paper.perf_runs import PHASES, main, phase_seconds
from pall_avalanche.paper.table1 import main as table1


def test_the_phases_of_a_profiled_table1_add_up_to_its_runs(tmp_path):
    profile = cProfile.Profile()
    profile.enable()
    table1(["--methods", "sequential,derpp", "--seeds", "0", "--epochs", "1",
            "--train-per-task", "30", "--jobs", "1", "--quiet", "--out", str(tmp_path)])
    profile.disable()
    phases = phase_seconds(pstats.Stats(profile))
    assert set(phases) == {*PHASES, "runs", "outside the runs"}
    assert sum(phases[p] for p in PHASES) == pytest.approx(phases["runs"])
    assert all(phases[p] >= 0 for p in PHASES[:-1])
    # every job that the two runs did shows: batches, evaluation, checks, DER++'s buffers,
    # a checkpoint per request, the records
    for phase in PHASES[:-1]:
        if phase != PHASES[2]:                   # the dispatch may round to nothing
            assert phases[phase] > 0, phase
    assert phases[PHASES[-1]] > phases[PHASES[1]]    # the method's steps outweigh the batches


def test_a_baseline_that_is_not_a_commit_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"--baseline no-such-ref: not a commit of "):
        main(["--baseline", "no-such-ref"])
