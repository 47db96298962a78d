"""The exactness audit: oracle sequences, the statistics on hand-made inputs, the strict PALL
options and provenance check, and a tiny end-to-end audit on digits with real training."""

from __future__ import annotations

import math
import re
from functools import partial

import numpy as np
import pandas as pd
import pytest
from helpers import FAST_CONFIG, benchmark_script, make_strategy, seq

from pall_avalanche.audit import (
    AUDIT_REQUESTS,
    AuditProbe,
    audit_rows,
    head_probabilities,
    js_divergence,
    model_features,
    oracle_sequence,
    roc_auc,
    run_audit,
)
from pall_avalanche.audit.oracle import not_learned, oracle_rows
from pall_avalanche.audit.permutation import eq1_test, ridge_scores, seed_folds
from pall_avalanche.config import for_benchmark, resolve_method_config
from pall_avalanche.evaluation.metrics import t_interval
from pall_avalanche.files import read_record
from pall_avalanche.requests.streams import RequestStream
from pall_avalanche.runs import run_record
from pall_avalanche.runs.spec import RunSpec, plan

AUDIT_CONFIG = {**FAST_CONFIG, "epochs": 2, "train_per_task": 40, "n_retrain_iters": 10}


# ------------------------------------------------------------------ oracle sequences
def test_oracle_sequence_drops_every_request_of_unlearned_tasks():
    oracle, unlearned = oracle_sequence(seq("L0 L1 L2 U1 L3 U2 L4 U0"))
    assert [str(r) for r in oracle] == ["L3", "L4"]
    assert unlearned == [1, 2, 0]
    oracle, unlearned = oracle_sequence(seq("L0 L1 L2 L3 U1 L4"))
    assert [str(r) for r in oracle] == ["L0", "L2", "L3", "L4"] and unlearned == [1]


def test_oracle_sequence_needs_an_unlearning_request():
    with pytest.raises(ValueError, match="unlearns no task"):
        oracle_sequence(seq("L0 L1"))


# ------------------------------------------------------------------ statistics
def test_js_divergence_hand_computed():
    assert js_divergence([1.0, 0.0], [0.0, 1.0]) == pytest.approx(1.0)
    assert js_divergence([0.3, 0.7], [0.3, 0.7]) == pytest.approx(0.0)
    # p=(.5,.5), q=(1,0): m=(.75,.25); KL(p||m)=.5log2(2/3)+.5log2(2), KL(q||m)=log2(4/3)
    expected = 0.5 * (0.5 * math.log2(2 / 3) + 0.5) + 0.5 * math.log2(4 / 3)
    assert js_divergence([0.5, 0.5], [1.0, 0.0]) == pytest.approx(expected)
    assert expected == pytest.approx(0.3113, abs=1e-4)
    rows = js_divergence([[1.0, 0.0], [0.5, 0.5]], [[0.0, 1.0], [0.5, 0.5]])
    assert rows.tolist() == pytest.approx([1.0, 0.0])
    with pytest.raises(ValueError, match="different shapes"):
        js_divergence([1.0, 0.0], [1.0, 0.0, 0.0])


def test_roc_auc_hand_computed():
    assert roc_auc([0.9, 0.8, 0.1, 0.2], [1, 1, 0, 0]) == 1.0
    assert roc_auc([0.1, 0.2, 0.9, 0.8], [1, 1, 0, 0]) == 0.0
    # positives 0.8, 0.4; negatives 0.6, 0.2: pairs won 1+1+0+1 = 3 of 4
    assert roc_auc([0.8, 0.4, 0.6, 0.2], [1, 1, 0, 0]) == 0.75
    assert roc_auc([0.5, 0.5, 0.5], [1, 0, 0]) == 0.5  # ties count one half
    with pytest.raises(ValueError, match="both classes"):
        roc_auc([0.1, 0.2], [1, 1])


def test_t_interval():
    mean, low, high = t_interval([1.0, 2.0, 3.0])
    half = 4.302652729911275 * 1.0 / math.sqrt(3)  # t_{0.975, 2} · s / √n, s = 1
    assert (mean, low, high) == pytest.approx((2.0, 2.0 - half, 2.0 + half))
    with pytest.raises(ValueError, match="at least 2"):
        t_interval([1.0])


def test_head_probabilities_and_features_hand_made():
    logits = np.array([[0.0, 0.0, 2.0, 0.0], [0.0, 0.0, 0.0, 2.0]])  # T=2, cpt=2
    probs = head_probabilities(logits, 2)
    e2 = math.exp(2) / (1 + math.exp(2))
    assert probs[0, 0].tolist() == pytest.approx([0.5, 0.5])
    assert probs[0, 1].tolist() == pytest.approx([e2, 1 - e2])
    output = {"train": {"logits": logits.tolist(), "y": [0, 1]}}
    feats = model_features(output, task=1, classes_per_task=2, head_only=True)
    # head 1: max prob e2 both; entropy H(e2); logit norm 2; accuracy 1; CE -log(e2)
    entropy = -(e2 * math.log2(e2) + (1 - e2) * math.log2(1 - e2))
    assert feats.tolist() == pytest.approx([e2, entropy, 2.0, 1.0, -math.log(e2)])
    assert len(model_features(output, 1, 2)) == 3 * 2 + 2


def test_distinguisher_separates_separable_and_not_twins():
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(10), 2)
    labels = np.tile([1, 0], 10)
    folds = seed_folds(groups, 5)
    shifted = rng.normal(size=(20, 3)) + 4.0 * labels[:, None]
    assert roc_auc(ridge_scores(shifted, labels, folds)[0], labels) == 1.0
    twins = np.repeat(rng.normal(size=(10, 3)), 2, axis=0)  # U and O identical per seed
    assert roc_auc(ridge_scores(twins, labels, folds)[0], labels) == 0.5


def test_oracle_rows_align_the_oracle_with_the_unlearned_sequence():
    # R = L0 L1 L2 U1 L3 U0 L4; R′ drops tasks 0 and 1: L2 L3 L4 (rows 0, 1, 2)
    rows = oracle_rows(seq("L0 L1 L2 U1 L3 U0 L4"))
    # U1 (row 3) sits after L2 (R′ row 0); its later rows L3 and L4 are R′'s 1 and 2 (U0 is
    # not in R′); U0 (row 5) sits after L3 (R′ row 1), L4 after it
    assert rows == [(1, 0, [1, 2]), (0, 1, [2])]
    assert oracle_rows(seq("L0 L1 U1 L2 L3")) == [(1, 0, [1, 2])]
    # nothing of R′ before the request: no aligned row
    assert oracle_rows(seq("L1 U1 L2")) == []


def test_not_learned_counts_failed_checks_of_the_unlearned_task():
    def record(failed_1, failed_2=False):
        return {"requests": [{"kind": "learn", "task": 1}, {"kind": "learn", "task": 2},
                             {"kind": "unlearn", "task": 1}],
                "learning_checks": [{"task": 1, "failed": failed_1},
                                    {"task": 2, "failed": failed_2}]}

    assert not_learned([record(True), record(False, True), record(True, True)]) == 2


# ------------------------------------------------------------------ strict PALL options
def test_beta_zero_stores_no_logits_and_cascade_redraws_later_tasks():
    strategy, bm, _ = make_strategy("pall", beta=0.0)
    strict, _, _ = make_strategy("pall", beta=0.0, strict_cascade=True)
    for s in (strategy, strict):
        for exp in RequestStream(bm, seq("L0 L1 L2")):
            s.train(exp)
    assert all(z is None for _, _, z in strategy.memory.buffers.values())
    net = strict.model
    own_2 = net.masks[2] - net.cumulative_mask([0, 1])
    assert strict.cascade_set(0) == (net.masks[1] - net.masks[0]) | own_2
    assert strict.cascade_set(2).count() == 0
    assert strict.redraw_set(0) == strict.forget_set(0) | strict.cascade_set(0)
    assert strategy.redraw_set(0) == strategy.forget_set(0)
    with pytest.raises(ValueError, match="strict_cascade"):
        make_strategy("pall", strict_cascade="yes")


def test_variants_resolve_to_their_options():
    assert resolve_method_config(AUDIT_CONFIG, "pall_strict")["beta"] == 0.0
    assert resolve_method_config(AUDIT_CONFIG, "pall_strict")["strict_cascade"] is True
    assert resolve_method_config(AUDIT_CONFIG, "pall_beta0")["beta"] == 0.0
    assert resolve_method_config(AUDIT_CONFIG, "pall")["strict_cascade"] is False


# ------------------------------------------------------------------ provenance
@pytest.mark.parametrize(("method", "direct", "strict"), [
    ("wsn", False, False), ("pall", True, False), ("pall_beta0", True, False),
    ("pall_strict", True, True), ("pall_leak_buffer", False, False)])
def test_provenance_check_at_run_time(method, direct, strict):
    record = run_record(method, 0, AUDIT_CONFIG, requests=seq("L0 L1 L2 U1"),
                        probe=partial(AuditProbe, [1]))
    (check,) = record["probe"]["provenance"]
    assert check["task"] == 1 and check["direct_entries"] > 0 and check["forward_entries"] > 0
    assert (check["direct_pass"], check["strict_pass"]) == (direct, strict)
    assert check["logits_free"] == (method not in ("pall", "pall_leak_buffer"))  # β=0.5
    # retraining with B^t during t's own request: what it retrained counts as left of t
    assert (check["buffer_entries"] > 0) == (method == "pall_leak_buffer")
    if method == "pall_leak_buffer":
        assert check["direct_missed"] >= check["buffer_entries"]


@pytest.mark.parametrize("method", ["pall", "pall_beta0", "pall_strict"])
def test_direct_provenance_holds_over_two_unlearning_requests(method):
    """The second unlearning must re-draw what the first retraining moved with B^t in the
    loss — the entries of m_t — and nothing outside m_t is required of it."""
    record = run_record(method, 0, AUDIT_CONFIG, requests=seq("L0 L1 L2 L3 U0 U2"),
                        probe=partial(AuditProbe, [0, 2]))
    checks = record["probe"]["provenance"]
    assert [c["task"] for c in checks] == [0, 2]
    assert all(c["direct_pass"] and c["direct_entries"] > 0 for c in checks)


def test_provenance_is_not_applicable_to_dense_methods():
    record = run_record("sequential", 0, AUDIT_CONFIG, requests=seq("L0 L1 U1"),
                        probe=partial(AuditProbe, [1]))
    assert record["probe"]["provenance"] is None


# ------------------------------------------------------------------ end to end
def _audit(out, methods, seeds):
    runs = run_audit(methods, seeds, AUDIT_CONFIG, out, requests=seq("L0 L1 L2 U1"),
                     show_progress=False)
    return runs, {r["method"]: r for r in audit_rows(runs, methods)}


@pytest.fixture(scope="module")
def tiny_audit(tmp_path_factory):
    out = tmp_path_factory.mktemp("audit")
    methods = ["sequential", "independent", "pall"]
    return (out, methods, *_audit(out, methods, [0, 1]))


def test_audit_rows_report_each_method_as_it_is_done(tiny_audit):
    """The permutation tests take minutes: ``done`` hears of every method, in order, with the
    rows as ``audit_rows`` gives them without it."""
    _, methods, runs, rows = tiny_audit
    heard = []
    again = audit_rows(runs, methods, done=heard.append)
    assert heard == methods
    assert [r["method"] for r in again] == methods and again[0].keys() == rows[methods[0]].keys()


def test_tiny_audit_records_are_stored_and_reused(tiny_audit):
    out, methods, runs, _ = tiny_audit
    record = runs["reference"][0]
    assert record["train_seed"] == record["seed"] + 100_000
    # its identity includes the probe's code (pall_avalanche.audit.probes)
    spec, = plan([record["method"]], [record["seed"]], AUDIT_CONFIG, requests=seq("L0 L2"),
                 train_seed_offset=100_000, modules=["pall_avalanche.audit.probes"])
    assert read_record(spec.record_path(out / "reference")) == record
    assert record["code"] == spec.code != RunSpec.of(record["method"], record["seed"],
                                                     AUDIT_CONFIG, seq("L0 L2")).code
    again = run_audit(methods[:1], [0, 1], AUDIT_CONFIG, out, requests=seq("L0 L1 L2 U1"),
                      show_progress=False)
    assert again["unlearned"] == [r for r in runs["unlearned"] if r["method"] == "sequential"
                                  and r["seed"] in (0, 1)]
    outputs = record["probe"]["outputs"]["1"]
    assert len(outputs["train"]["y"]) == 40 and len(outputs["train"]["logits"][0]) == 10


def test_tiny_audit_measurements(tiny_audit):
    _, _, runs, rows = tiny_audit
    # the relearning attack: Independent relearns from the same untrained model as its oracle
    for variant in ("k5_head", "k5_all", "k20_head", "k20_all"):
        assert rows["independent"][f"relearn_{variant}_acc_gap"] == 0.0
        assert rows["independent"][f"relearn_{variant}_steps_gap"] == 0.0
    # Sequential's gap after 10 steps, by hand from its records' curves (seeds paired)
    curves = {role: {r["seed"]: r["probe"]["relearn"]["1"]["k5_all"] for r in runs[role]
                     if r["method"] == "sequential"} for role in ("unlearned", "oracle")}
    gaps = [curves["unlearned"][s][10] - curves["oracle"][s][10] for s in (0, 1)]
    assert rows["sequential"]["relearn_k5_all_acc_gap"] == pytest.approx(sum(gaps) / 2)
    assert math.isnan(rows["sequential"]["relapse"])   # U1 is the last request: no relapse
    # Sequential keeps task 1's head: its head alone gives it away.
    assert rows["sequential"]["auc_head"] == 1.0
    assert rows["sequential"]["js_gap"] > 0
    # Independent answers the unlearned task with the same untrained model as the oracle:
    # every permutation scores what the labels score (p = 1)
    assert rows["independent"]["auc_head"] == 0.5 and rows["independent"]["auc_head_p"] == 1.0
    # the runs that left task 1 at chance (2 epochs are little for PALL's subnetwork)
    for method in ("sequential", "pall"):
        failed = [c["failed"] for r in runs["unlearned"] if r["method"] == method
                  for c in r["learning_checks"] if c["task"] == 1]
        assert len(failed) == 2 and rows[method]["not_learned"] == sum(failed)
    # nothing of R′ follows the unlearning (U1 is last): no relapse reference
    assert "relapse_oracle" not in rows["pall"]
    assert rows["independent"]["provenance"] == "n/a"
    assert rows["pall"]["provenance"] == "pass"
    assert rows["pall"]["provenance_strict"] == "FAIL (2/2)"


def test_unpaired_eq1_reads_no_two_models_of_one_seed(tiny_audit):
    """Unpaired Eq. 1 takes the unlearned models of seeds 0 and 2 and the oracles of seeds 1
    and 3 (every other seed, in order): its AUC is the test on those four models' features,
    computed here. The tiny audit's two seeds, copied as seeds 2 and 3, make four; with
    two seeds there is no unpaired row."""
    _, _, runs, rows = tiny_audit
    assert "auc_unpaired" not in rows["sequential"]
    copies = {role: [*records, *({**r, "seed": r["seed"] + 2} for r in records)]
              for role, records in runs.items()}
    row, = audit_rows(copies, ["sequential"], n_permutations=60)
    by_seed = {role: {r["seed"]: r for r in copies[role] if r["method"] == "sequential"}
               for role in ("unlearned", "oracle")}
    models = [by_seed["unlearned"][0], by_seed["oracle"][1], by_seed["unlearned"][2],
              by_seed["oracle"][3]]
    cpt = models[0]["split"]["classes_per_task"]
    features = np.array([model_features(m["probe"]["outputs"]["1"], 1, cpt) for m in models])
    expected = eq1_test(features, np.array([1, 0, 1, 0]), np.array([0, 1, 2, 3]),
                        n_permutations=60, paired=False)
    assert row["auc_unpaired"] == expected["auc"] and row["auc_unpaired_p"] == expected["p"]
    assert row["auc_unpaired_time"] == "end"


@pytest.mark.slow
def test_eq1_separates_what_kept_the_head_and_not_an_exact_method(tmp_path):
    """The committed quick audit's setting (plain digits, R = L0 L1 L2 L3 U1 L4), 8 seeds:
    Sequential keeps t's head and Eq. 1's permutation test finds it; Independent's unlearned
    model is its oracle's (p = 1)."""
    config = for_benchmark("digits")
    requests = seq(" ".join(AUDIT_REQUESTS))
    methods = ["sequential", "independent"]
    runs = run_audit(methods, list(range(8)), config, tmp_path, requests=requests,
                     show_progress=False, jobs=2)
    rows = {r["method"]: r for r in audit_rows(runs, methods, n_permutations=500)}
    assert rows["sequential"]["auc_head"] > 0.9 and rows["sequential"]["auc_head_p"] < 0.01
    assert rows["independent"]["auc_head_p"] == 1.0


def _audit_argv(tmp_path) -> list[str]:
    return ["--methods", "sequential,independent", "--seeds", "0", "1", "--shadows", "4",
            "--quiet", "--set", "epochs=1", "--set", "n_retrain_iters=5", "--permutations", "300",
            "--replications", "2", "--out", str(tmp_path / "res"),
            "--report-dir", str(tmp_path / "rep")]


@pytest.mark.filterwarnings("ignore:--seeds")       # two seeds: warned, as end to end below
def test_audit_script_refuses_what_its_evidence_cannot_carry_before_it_trains(tmp_path):
    script, argv = benchmark_script("audit"), _audit_argv(tmp_path)
    for bad, message in ((["--n-unlearn", "2"], r"--n-unlearn=2 does not apply"),
                         (["--shadows", "2"], r"--shadows 2: at least 4 shadow runs"),
                         (["--permutations", "39"], r"--permutations 39: too few for a family "
                                                    r"of 2 tests at family-wise 0\.05 .*at least "
                                                    r"40"),
                         (["--replications", "3"], r"--replications 3: must lie in 1\.\.2"),
                         (["--replications", "0"], r"--replications 0: must lie in 1\.\.2"),
                         (["--canaries", "1"], r"--canaries 1: use 0 \(no canary runs\) or at "
                                               r"least 2"),
                         (["--canary-seeds", "3"], r"--canary-seeds 3: must lie in 2\.\.2"),
                         (["--canary-seeds", "0"], r"--canary-seeds 0: must lie in 2\.\.2")):
        with pytest.raises(ValueError, match=message):
            script.main([*argv, *bad])
    assert not list(tmp_path.rglob("*.json"))          # nothing ran


@pytest.mark.slow
def test_audit_script_end_to_end(tmp_path, capsys):
    script, argv = benchmark_script("audit"), _audit_argv(tmp_path)
    with pytest.warns(UserWarning, match=r"--seeds: 2 seed\(s\) are too few for Eq. 1's "
                                         r"5-fold cross-validation"):
        script.main(argv)
    # progress across the five stages: every line counts all the audit's runs (one record
    # each, an oracle shared by PALL's variants once), the last line all of them
    written = len(list((tmp_path / "res").rglob("seed*.json")))
    overall = re.findall(r"; overall (\d+)/(\d+)", capsys.readouterr().err)
    assert overall and {int(total) for _, total in overall} == {written}
    assert [int(done) for done, _ in overall] == sorted(int(done) for done, _ in overall)
    assert overall[-1] == (str(written), str(written))
    markdown = (tmp_path / "rep" / "audit_digits.md").read_text()
    assert f"Command: `python benchmarks/audit.py {' '.join(argv)}`" in markdown
    assert f"Audited sequence R: {' '.join(AUDIT_REQUESTS)}" in markdown
    assert "Evidence: Eq. 1 on 2 seeds; 4 shadow runs per method and role" in markdown
    assert "train_per_task 20" in markdown                  # the powered setting's keys
    lines = [line for line in markdown.splitlines() if line.startswith("| ")]
    header, *rows = [[c.strip() for c in line.strip("|").split(" | ")] for line in lines]
    table = {row[0]: dict(zip(header, row, strict=True)) for row in rows}
    # the positive control and the leaky variants of each audited method's kind run beside
    # it (Sequential is the dense methods' own control); no subnetwork method, so no leaky
    # PALL variant
    assert sorted(table) == sorted(["Sequential", "Independent",
                                    "Independent, no unlearning (control)",
                                    "Independent keeping 50 % of t's model",
                                    "Independent keeping 25 % of t's model",
                                    "Sequential keeping 50 % of t's update",
                                    "Sequential keeping 25 % of t's update"])
    swap = "Data-swap pair, state after t's unlearning (white-box)"
    assert table["Independent"][swap] == "state identical"
    assert re.fullmatch(r"[\d,]+ entries differ \(weights [\d,]+\)", table["Sequential"][swap])
    for name, row in table.items():
        failed, runs = map(int, row["t not learned"].split("/"))
        assert runs == 2 + 4
        if failed:       # never judged without learning
            assert row["Verdict"] == f"not measurable: t not learned in {failed}/6 runs", name
        elif row["Power shown by"].startswith("none"):
            assert row["Verdict"].startswith("no power"), name
        assert row["TPR % at 1 % FPR"] == "n/a"             # 20 negatives carry no 1 % FPR
        assert re.fullmatch(r"n/a|[+-]\d\.\d{3} \((end|after U1)\) \(p [\d.e-]+; "
                            r"≤ [+-]\d\.\d{3}\)",
                            row["Gap to control, per example (primary; simultaneous bound)"]), row
        assert re.fullmatch(r"-?[\d.]+ \[-?[\d.]+, -?[\d.]+\]( \([\d.]+\))?|n/a",
                            row["Oracle relapse (worst)"]), row
    assert table["Sequential"]["Eq. 1 AUC, t's head (instrument, raw p)"].startswith("1.000")
    numbers = pd.read_csv(tmp_path / "rep" / "audit_digits.csv").set_index("method")
    assert {"klom_retain_q0.5_p", "relapse_oracle", "leak_auc_upper",
            "leak_auc_bound", "leak_auc[end]", "leak_auc[after U1]", "auc_p_adj"
            } <= set(numbers.columns)
    # neither keeps a buffer: no retained-set exposure
    assert "retained_change" not in numbers or np.isnan(numbers.loc["independent",
                                                                    "retained_change"])
    assert np.isfinite(numbers.loc["independent_no_unlearning", "leak_auc"])
    # the controls' and leaky variants' shadow experiment again at the second seed: its gap
    # first at the audit's own seed, then at seed 1; the audited methods are not replicated
    for method in ("sequential", "independent_no_unlearning", "sequential_leak_25"):
        row = numbers.loc[method]
        assert row["replications"] == 2, method
        first, second = row["leak_auc_by_seed"].split("; ")
        assert first == f"0: {row['leak_auc']:+.3f}" and second.startswith("1: ")
        gaps = [row["leak_auc"], float(second[3:])]
        assert row["leak_auc_rep_min"] == pytest.approx(min(gaps), abs=5e-4)
    assert np.isnan(numbers.loc["independent", "replications"])

