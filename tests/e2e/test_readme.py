"""The README's Avalanche script runs as it stands: an Avalanche user's own benchmark
generator, evaluator, TextLogger and StepLR scheduler with PALL dropped in; the logger shows
the paper's metrics after every request and the learning rate that trains halves per epoch.
The Avalanche tutorial (docs/tutorials/avalanche.md) includes that block and adds Avalanche's
multi-head example with PALL, which runs here too."""

from __future__ import annotations

import ast
import csv
import re
from pathlib import Path

import pytest

from pall_avalanche.evaluation import compute_metrics
from pall_avalanche.requests import generate_requests
from pall_avalanche.strategies import UnlearningPlugin

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
TUTORIAL = ROOT / "docs" / "tutorials" / "avalanche.md"


def avalanche_script(block: int = 0) -> str:
    """Block 0: the README's Avalanche snippet (between its ``avalanche`` snippet markers, which
    the tutorial includes); block 1: the tutorial's multi-head block, its own first Python
    block."""
    if block == 0:
        text = README.read_text()
        section = text[text.index("[start:avalanche]"):text.index("[end:avalanche]")]
    else:
        section = TUTORIAL.read_text()
    return re.findall(r"```python\n(.*?)```", section, re.S)[0]


class Rates(UnlearningPlugin):
    """The learning rate of every parameter group at the first iteration of each epoch."""

    def __init__(self):
        super().__init__()
        self.per_request: list[list[list[float]]] = []

    def before_training_exp(self, strategy, **kwargs):
        self.per_request.append([])

    def before_training_iteration(self, strategy, **kwargs):
        if strategy.clock.train_epoch_iterations == 0:
            self.per_request[-1].append([g["lr"] for g in strategy.optimizer.param_groups])


def test_the_readme_avalanche_script_runs_and_logs_the_papers_metrics(capfd):
    script = avalanche_script()
    # the one addition: a probe of the learning rate, appended to the script's own plugins
    probed = script.replace("plugins=[LRSchedulerPlugin(", "plugins=[rates, LRSchedulerPlugin(")
    assert probed != script
    rates = Rates()
    namespace = {"rates": rates}
    exec(compile(probed, str(README), "exec"), namespace)
    logged = capfd.readouterr().out   # TextLogger writes to the stdout of its import time
    requests = generate_requests(n_tasks=5, n_unlearn=3, seed=0)
    # the paper's metrics in the user's TextLogger, next to Avalanche's own metric
    assert "UnlearningMetrics/A_l = " in logged and "UnlearningMetrics/F_u = " in logged
    assert "Top1_Acc_Exp" in logged
    # every request's row reached the evaluator; the last A_l and F_u printed (by the final
    # evaluation's report) are those of all the rows
    values = namespace["evaluator"].get_all_metrics()
    assert values["UnlearningMetrics/accuracy/task0"][0] == list(range(len(requests)))
    rows = list(zip(*(values[f"UnlearningMetrics/accuracy/task{t}"][1] for t in range(5)),
                    strict=True))
    expected = compute_metrics([list(r) for r in rows], requests)
    printed = {name: float(re.findall(rf"UnlearningMetrics/{name} = (-?[\d.]+)", logged)[-1])
               for name in ("A_l", "F_u")}
    assert printed == {n: pytest.approx(expected[n], abs=5e-5) for n in printed}
    # the scheduler's rate trains: 0.05 for five epochs, then 0.025, in every learning request
    assert len(rates.per_request) == 5
    assert all(r == [[0.05]] * 5 + [[0.025]] * 5 for r in rates.per_request)
    # its last line is the README's expected output (within a point: another CPU's vector
    # kernels may flip a test sample), and F_u^max is within the harness's own records' range
    last = ast.literal_eval(logged.strip().splitlines()[-1])
    quoted = ast.literal_eval(re.findall(r"```text\n(\{.*?\})\n```", README.read_text())[0])
    assert last.keys() == quoted.keys() == set(expected)
    assert last == {name: pytest.approx(value, abs=1.0) for name, value in quoted.items()}
    assert last == {name: pytest.approx(round(expected[name], 2), abs=5e-3) for name in last}
    # the committed digits report of PALL: F_u^max within two standard deviations over seeds
    # of the mean of one of its rows
    with open(ROOT / "reports" / "table1_digits.csv") as f:
        pall = [row for row in csv.DictReader(f) if row["method"] == "pall"]
    assert len(pall) == 3
    assert last["F_u_max"] <= max(float(row["F_u_max_mean"]) + 2 * float(row["F_u_max_std"])
                                  for row in pall)


def test_the_readme_multihead_block_runs_pall_with_original_ids_and_replay():
    namespace: dict = {}
    exec(compile(avalanche_script(1), str(TUTORIAL), "exec"), namespace)
    strategy, results = namespace["strategy"], namespace["results"]
    assert type(strategy.model.net.model).__name__ == "MTSimpleMLP"
    assert strategy.active_tasks == [0, 2, 3, 4]
    classifier = strategy.model.net.classifier
    # heads as Avalanche sizes them: task t's head has 2t + 2 units, its own two active
    for task in range(5):
        units = getattr(classifier, f"active_units_T{task}").tolist()
        assert len(units) == 2 * task + 2, task
        assert units == ([0] * 2 * task + [1, 1] if task != 1 else [0] * 4), task
    accuracy = {t: results[f"Top1_Acc_Exp/eval_phase/test_stream/Task{t:03}/Exp{t:03}"]
                for t in range(5)}
    assert all(accuracy[t] > 0.75 for t in (0, 2, 3, 4)), accuracy
    assert accuracy[1] == 0.0       # as never learned: every unit masked, class 0 predicted
