"""``perf_steps.py``: the report of a small measurement, its refusals, and what the issue
asks of every method (their remaining tasks in one pass): a step's aten operations do not
grow with the number of tasks. Operation counts are a property of the code, not of the
machine's speed (measured with torch's profiler)."""

from __future__ import annotations

import pytest

from pall_avalanche.paper.perf_steps import main, measure

#: Methods whose steps run a loop over the tasks in the code before (replay, retraining,
#: reference gradients, penalties, distillation, codes, backups, regularised generations).
PER_TASK = ("pall", "derpp", "er_retrain", "gem", "ewc", "lwf", "lsf", "amnesiac_hat", "uncle")


def test_no_step_grows_with_the_number_of_tasks():
    rows = {(r["T"], r["method"]): r for r in measure(PER_TASK, [5, 10], train_per_task=32,
                                                       threads=1)}
    for method in PER_TASK:
        for kind in ("learning", "unlearning"):
            small, large = rows[(5, method)][kind][0], rows[(10, method)][kind][0]
            if small is None:
                assert large is None, (method, kind)       # the method has no such step
                continue
            # 4 → 9 earlier tasks: the same operations but for a handful of bookkeeping ones
            assert large <= small * 1.05 + 10, (method, kind, small, large)


def test_the_report_names_its_command_and_both_tables(tmp_path, capsys):
    text = main(["--tasks", "5", "--methods", "pall", "sequential", "--train-per-task", "32",
                 "--report-dir", str(tmp_path)])
    assert (tmp_path / "perf_steps.md").read_text() == text + "\n"
    assert "`python benchmarks/perf_steps.py --tasks 5 --train-per-task 32 --threads 1 " in text
    rows = [line for line in text.splitlines() if line.startswith("| pall | 5 |")]
    assert len(rows) == 2                                     # operations, then times
    assert all(cell.count("×") == 1 for cell in rows[0].split("|")[3:5])
    assert "at T = 20" not in text                            # the target needs T = 20


@pytest.mark.parametrize("argv, message", [
    (["--tasks", "7"], "--tasks 7: each T must be a multiple of 5"),
    (["--methods", "nope"], "--methods nope: unknown"),
    (["--train-per-task", "8"], "--train-per-task=8 must be >= 32"),
    (["--baseline", "no-such-commit", "--tasks", "5"],
     "--baseline no-such-commit: not a commit of this repository"),
])
def test_bad_options_are_refused_in_one_line(argv, message):
    with pytest.raises(ValueError, match=message):
        main(argv)
