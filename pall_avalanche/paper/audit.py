"""Exactness audit: could an adversary tell that task t was learned and then unlearned?

    python benchmarks/audit.py                          # the powered setting (about an hour)
    python benchmarks/audit.py --quick                  # plain digits, a first look in minutes
    python benchmarks/audit.py --seeds 0 1 2 3 --shadows 32 --methods pall,independent
    python benchmarks/audit.py --requests seq.json      # another audited sequence

Two experiments per method, all records in ``--out`` and reused on reruns (a record's
identity includes the code that wrote it):

- Eq. 1 (:mod:`pall_avalanche.audit.oracle`): per seed, the unlearned model on R, an oracle on
  R′ (t never learned) and a reference oracle: the distinguisher's AUC and permutation test,
  JS and MIA gaps, provenance, relapse beside the oracle's, the relearning attack;
- the shadow runs (:mod:`pall_avalanche.audit.shadows`): ``--shadows`` runs that learn t on
  random halves of D^t and unlearn it, attacked example by example against the same attack on
  never-learned oracles, KLoM per example and the retained-set exposure
  (:mod:`pall_avalanche.audit.exposure`).

The positive control (PALL whose unlearning changes nothing) and the leaky PALL variants
(:mod:`pall_avalanche.strategies.leaky`) always run beside the audited methods: the first says
whether the attack has power in the setting, the second how small a leak it detects (δ).
The table with one verdict per method (:mod:`pall_avalanche.audit.verdict`) is printed and
written to ``<report-dir>/audit_<benchmark>[_quick].{md,csv,tex}``.
"""

from __future__ import annotations

import math
import time
import warnings
from collections import Counter
from pathlib import Path

import pandas as pd

from pall_avalanche.audit.protocol import (
    AUDIT_REQUESTS,
    N_FOLDS,
    N_PERMUTATIONS,
    REFERENCE_SEED_OFFSET,
)
from pall_avalanche.catalog import (
    AUDIT_CONTROL,
    AUDIT_LEAKS,
    method_label,
)
from pall_avalanche.cli import run_options
from pall_avalanche.exit_codes import main_guard
from pall_avalanche.paper.kit import script_parser, start_script
from pall_avalanche.reports import provenance, write_report
from pall_avalanche.requests import RequestSequence

AUDIT_METHODS = ("sequential,ewc,derpp,lsf,packnet,wsn,independent,pall,pall_beta0,pall_strict,"
                 "er_retrain")


def _notes(summary, reference_seed_offset: int, n_permutations: int) -> tuple[str, ...]:
    """The report's notes on the audit's measures and on what its verdicts rest on."""
    from pall_avalanche.audit.summary import POWER_AUC, POWER_AUC_LOW
    from pall_avalanche.audit.verdict import ALPHA

    if summary.powered is None:
        power = "Power: the positive control was not run; nothing is judged."
    else:
        power = (f"Power: the positive control ({method_label(AUDIT_CONTROL)}) is "
                 + ("" if summary.powered else "NOT ")
                 + f"detected (a leak test at family-wise {ALPHA:g}, per-example AUC ≥ "
                   f"{POWER_AUC:g} with its lower bound > {POWER_AUC_LOW:g})"
                 + ("." if summary.powered else ": the attack has no power in this setting and "
                    "no verdict is given."))
    rows = {r["method"]: r for r in summary.rows}
    doses = "; ".join(
        f"{method_label(m)}: gap {rows[m]['leak_auc']:+.3f} (p {rows[m]['leak_auc_p_adj']:.3g}),"
        f" task level {rows[m]['leak_inout_auc']:+.3f} (p {rows[m]['leak_inout_auc_p_adj']:.3g})"
        for m in AUDIT_LEAKS if m in rows and "leak_auc_p_adj" in rows[m])
    delta = (f"Dose-response ({doses}): the smallest leak detected with every larger dose "
             f"detected too is δ = {summary.delta_text} ({method_label(summary.delta[1])})"
             if summary.delta else f"Dose-response ({doses}): no dose of leak is detected "
                                   "(δ unknown)")
    resolution = (f"Resolution: the smallest adjusted p-value a test can reach is "
                  f"{summary.smallest_p:.3g}, Eq. 1's {summary.smallest_eq1_p:.3g} with "
                  f"{summary.n_seeds} seeds")
    if max(summary.smallest_p, summary.smallest_eq1_p) >= ALPHA:
        resolution += (f": at or above {ALPHA:g}, so some tests cannot detect anything here "
                       "(more permutations or seeds)")
    return (
        power,
        delta + "; 'no leak above δ' means that a PALL variant keeping that much of what t "
        "trained is detected in this setting, and nothing is found in the method: a bound "
        "measured here, not a guarantee for other models or sequences.",
        resolution + ".",
        f"Tests: permutation p-values ({n_permutations:,} permutations per test, the whole fit "
        "redone per permutation); Holm's correction "
        f"over the audited methods × tests ({summary.family_size} tests; family-wise "
        f"{ALPHA:g}); the positive control and the leaky variants are calibration "
        "instruments judged at the Bonferroni bound of the same family (the strictest bar "
        "an audited method faces). 'p' columns are adjusted.",
        "IN/OUT attack (per example, U-LiRA style): shadow runs learn t on a random half of its "
        "training set and unlearn it; per example, the logit-scaled confidence of its label "
        "under t's head and every later task's head is fitted with Gaussians over the other "
        "runs where it was IN and where it was OUT (leave one run out); 'gap' = the attack's "
        "AUC minus the same attack's AUC on oracles that never learned t (the control), with "
        "its one-sided 95 % upper bound; its null permutes every example's memberships across "
        "runs in both. TPR at an FPR is printed only where ≥ 10/FPR independent negatives "
        "(distinct target examples) carry it, else n/a.",
        "Eq. 1: a ridge classifier (standardised summary features of the final model's outputs "
        "on t's training inputs, all heads / t's head only) tells unlearned from never-learned, "
        "cross-validated with each seed's pair in one fold; its null swaps the pair's labels "
        "within seeds. KLoM: per example, the KL of Gaussians fitted to its margin in the "
        "unlearned shadow runs and in the oracle shadow runs (paired by training seed); the "
        "median and the worst decile over t's examples (the retained tasks' and the test "
        "examples' in the CSV), null: swaps within pairs.",
        "Retained-set exposure: per shadow run, the AUC of the remaining tasks' buffer members "
        "against their other training examples (confidence under their own head), after the "
        "unlearning request minus before (mean over runs, Student-t 95 %); n/a without a "
        "buffer.",
        "Relapse: after t's unlearning, the largest rise of t's test accuracy over the rest of "
        "the sequence (mean over seeds with a Student-t interval, the worst record in "
        "brackets), beside the oracle's: the same statistic on the never-learned t's accuracy "
        "over the aligned rows. Relearning: the final model fine-tuned on k samples per class "
        "of t against the oracle fine-tuned the same way (accuracy gap after 10 steps). "
        f"JS and MIA gaps against a reference oracle (training seed +{reference_seed_offset}) "
        "are in the CSV.",
        "Provenance (subnetwork methods): every entry trained with D^t or B^t re-drawn; "
        "'FAIL (k/n)': k of n unlearning requests over the seeds (the strict check in the CSV).",
        "Learning: 't not learned' counts the runs (Eq. 1 seeds and shadow runs) whose "
        "audited task was at chance on its own training data right after learning it; a "
        "method with any is 'not measurable'.",
    )


def _cells(frame: pd.DataFrame) -> pd.DataFrame:
    from pall_avalanche.audit import interval_cell

    rows = frame.to_dict("records")

    def known(row: dict, *names: str) -> bool:
        return all(row.get(key) == row.get(key) and row.get(key) is not None for key in names)

    def interval(name: str, digits: int, scale: float = 1.0) -> list[str]:
        keys = (name, f"{name}_low", f"{name}_high")
        return [interval_cell({k: r[k] * scale for k in keys}, name, digits)
                if known(r, *keys) else "n/a" for r in rows]

    def tested(name: str, bound: str | None = "upper") -> list[str]:
        out = []
        for r in rows:
            if not known(r, name, f"{name}_p_adj"):
                out.append("n/a")
                continue
            text = f"{r[name]:+.3f}" if name.startswith("leak") else f"{r[name]:.3f}"
            text += f" (p {r[f'{name}_p_adj']:.3g}"
            if bound and known(r, f"{name}_{bound}"):
                text += f"; ≤ {r[f'{name}_{bound}']:+.3f}" if name.startswith("leak") else \
                    f"; ≤ {r[f'{name}_{bound}']:.3f}"
            out.append(text + ")")
        return out

    def tpr(fpr: float) -> list[str]:
        key = f"attack_tpr@{fpr:g}"
        return [f"{100 * r[key]:.1f}" if known(r, key, "attack_negatives")
                and r["attack_negatives"] >= 10 / fpr else "n/a" for r in rows]

    def relapse(prefix: str) -> list[str]:
        return [f"{c} ({r[prefix + '_max']:.2f})" if c != "n/a" and known(r, prefix + "_max")
                else c for c, r in zip(interval(prefix, 2), rows, strict=True)]

    learned = [f"{r.get('not_learned', 0) + r.get('shadow_not_learned', 0)}/"
               f"{r.get('seeds', 0) + r.get('shadow_runs', 0)}" for r in rows]
    return pd.DataFrame({
        "Method": [method_label(r["method"]) for r in rows],
        "Verdict": [r["verdict"] for r in rows],
        "t not learned": learned,
        "IN/OUT AUC (per example)": interval("attack_auc", 3),
        "Control AUC": interval("control_auc", 3),
        "Gap to control (per example)": tested("leak_auc"),
        "Gap to control (task level)": tested("leak_inout_auc"),
        "TPR % at 1 % FPR": tpr(0.01),
        "Eq. 1 AUC (all heads)": tested("auc"),
        "Eq. 1 AUC (t's head)": tested("auc_head"),
        "KLoM on t, median": [f"{r['klom_forget_q0.5']:.3f}" if known(r, "klom_forget_q0.5")
                              else "n/a" for r in rows],
        "KLoM on t, worst decile": tested("klom_forget_q0.9", None),
        "Retained-set exposure Δ": interval("retained_change", 3),
        "Relapse (worst)": relapse("relapse"),
        "Oracle relapse (worst)": relapse("relapse_oracle"),
        "Relearning Δacc, k=5, head": interval("relearn_k5_head_acc_gap", 1),
        "Provenance": [r["provenance"] if isinstance(r.get("provenance"), str) else "n/a"
                       for r in rows],
        "A_l": [f"{r['A_l']:.2f} ± {r['A_l_std']:.2f}" if known(r, "A_l") else "n/a"
                for r in rows],
    })


#: The committed audit's setting, chosen by measurement (docs/explanation/audit.md, "How
#: exact is exact?"): digits' MLP with 20 training samples per task (a shadow run trains t
#: on 10) and 50 epochs of batch 8: every method learns t and memorises it, so the positive
#: control is detected; buffers of 10 samples per task (half a task), so that the
#: retained-set exposure has buffer members and others to compare.
POWERED = (("train_per_task", 20), ("epochs", 50), ("batch_size", 8), ("buffer_size", 50))
#: The committed audit's seeds for Eq. 1 and shadow runs per method and role, and its
#: permutations per test (77 tests of eleven audited methods reach adjusted p 0.0077: a
#: detection near the bar does not hang on the null's draws, docs/fidelity.md "Resolution").
DEFAULT_SEEDS, DEFAULT_SHADOWS, DEFAULT_PERMUTATIONS = 32, 64, 10_000
#: ``--quick``: plain digits (its configuration as it is but for :data:`QUICK_SETTING`), few
#: seeds and shadow runs: a first look in a few minutes.
QUICK = {"seeds": 6, "shadows": 8}
QUICK_SETTING = (("epochs", 5),)


def _left_out(runs: dict, shadow_runs: dict, methods: list[str], n_seeds: int,
              shadows: int) -> str:
    """The runs left out as diverged (no record written), per method, in words."""
    left, planned = Counter(), Counter()
    for roles, expected in ((runs, n_seeds), (shadow_runs, shadows)):
        for records in roles.values():
            present = Counter(r["method"] for r in records)
            for method in methods:
                left[method] += expected - present[method]
                planned[method] += expected
    found = [f"{method_label(m)} {left[m]} of {planned[m]}" for m in methods if left[m]]
    return ("runs left out as diverged (no record): " + ", ".join(found)) if found else (
        "no run diverged")


def quick_folders(out: Path, report_dir: Path) -> tuple[Path, Path]:
    """``--quick``'s (records, report) folders: ``results/audit_quick`` for the default
    ``results/audit``, the report beside the records unless ``--report-dir`` said
    otherwise (``report_dir`` equal to ``out``: it was not given)."""
    if out != Path("results/audit"):
        return out, report_dir
    quick = Path("results/audit_quick")
    return quick, quick if report_dir == out else report_dir


def main(argv=None) -> None:
    parser = script_parser(__doc__, name="audit", default_methods=AUDIT_METHODS.split(","))
    parser.add_argument("--shadows", type=int, default=None,
                        help=f"shadow runs per method and role (default {DEFAULT_SHADOWS}; "
                             f"--quick {QUICK['shadows']}; at least 4)")
    parser.add_argument("--quick", action="store_true",
                        help=f"a first look on plain digits (the powered setting's "
                             f"{', '.join(k for k, _ in POWERED)} left as the configuration "
                             f"has them, {', '.join(f'{k} {v}' for k, v in QUICK_SETTING)}): "
                             f"{QUICK['seeds']} seeds, {QUICK['shadows']} shadow runs unless "
                             "--seeds / --shadows say otherwise (report "
                             "audit_<benchmark>_quick, records under results/audit_quick)")
    parser.add_argument("--permutations", type=int, default=None,
                        help=f"permutations per test (default {DEFAULT_PERMUTATIONS}; --quick "
                             f"{N_PERMUTATIONS}; at least the number of audited tests / 0.05)")
    run = start_script(parser, argv, script="benchmarks/audit.py")
    args, config, requests = run.args, run.config, run.requests
    if args.shadows is not None and args.shadows < 4:
        raise ValueError(f"--shadows {args.shadows}: at least 4 shadow runs are needed (every "
                         "example needs IN and OUT runs besides the attacked one)")
    methods = [*run.methods, *(m for m in (AUDIT_CONTROL, *AUDIT_LEAKS) if m not in run.methods)]
    for key, value in QUICK_SETTING if args.quick else POWERED:
        run.default(key, value)    # the setting's keys, unless the command line sets them
    if args.quick:
        args.out, args.report_dir = quick_folders(args.out, args.report_dir)
    seeds = (run.seeds if args.seeds is not None
             else list(range(QUICK["seeds"] if args.quick else DEFAULT_SEEDS)))
    shadows = args.shadows or (QUICK["shadows"] if args.quick else DEFAULT_SHADOWS)
    permutations = (args.permutations if args.permutations is not None
                    else N_PERMUTATIONS if args.quick else DEFAULT_PERMUTATIONS)
    if args.n_unlearn is not None:
        raise ValueError(f"--n-unlearn={args.n_unlearn} does not apply: the audit replays the "
                         f"fixed sequence {' '.join(AUDIT_REQUESTS)} or --requests FILE")
    if len(seeds) < N_FOLDS:
        warnings.warn(f"--seeds: {len(seeds)} seed(s) are too few for Eq. 1's {N_FOLDS}-"
                      f"fold cross-validation (fewer folds are used); use at least "
                      f"{N_FOLDS} seeds (the committed report uses {DEFAULT_SEEDS})",
                      UserWarning, stacklevel=2)
    # torch and Avalanche only once the input is known to be good
    from pall_avalanche.audit import audit_specs, oracle_sequence, run_audit
    from pall_avalanche.audit.shadows import run_shadows, shadow_specs
    from pall_avalanche.audit.summary import summarise
    from pall_avalanche.audit.twins import runs_needed
    from pall_avalanche.audit.verdict import ALPHA, FAMILY_TESTS
    from pall_avalanche.runs.progress import OverallProgress, StageProgress

    tests = sum(m not in (AUDIT_CONTROL, *AUDIT_LEAKS) for m in methods) * len(FAMILY_TESTS)
    needed = math.ceil(max(tests, len(FAMILY_TESTS)) / ALPHA)
    if permutations < needed:
        raise ValueError(f"--permutations {permutations}: too few for {tests} tests at "
                         f"family-wise {ALPHA:g} (the smallest adjusted p-value is tests / "
                         f"(permutations + 1)); use at least {needed}")
    if requests is None:
        requests = RequestSequence.parse(" ".join(AUDIT_REQUESTS), config["n_tasks"])
    oracle, _ = oracle_sequence(requests)
    started = time.perf_counter()
    # the five stages' runs, counted together: every progress line says how many of all the
    # audit's runs are done and estimates the time left overall
    total = (runs_needed(audit_specs(methods, seeds, config, requests=requests))
             + runs_needed(shadow_specs(methods, shadows, config, requests=requests,
                                        seed=seeds[0])))
    options = {**run_options(args), "overall": OverallProgress(total)}
    runs = run_audit(methods, seeds, config, args.out, requests=requests, **options)
    shadow_runs = run_shadows(methods, shadows, config, args.out, requests=requests,
                              seed=seeds[0], **options)
    # the permutation tests take minutes: a line per method and test as they end
    tests_bar = StageProgress(2 * len(methods), "tests", not args.quiet, names=str)
    summary = summarise(runs, shadow_runs, methods, n_permutations=permutations,
                        done=tests_bar.update)
    tests_bar.close()
    minutes = (time.perf_counter() - started) / 60
    frame = pd.DataFrame(summary.rows)
    sequences = (f"Audited sequence R: {' '.join(map(str, requests))}; oracle R′: "
                 f"{' '.join(map(str, oracle))}")
    n_records = sum(len(v) for v in (*runs.values(), *shadow_runs.values()))
    effort = (f"Evidence: Eq. 1 on {len(seeds)} seeds; {shadows} shadow runs per method and "
              f"role (each target example IN in about {shadows // 2}); {n_records} records "
              f"(the leaky variants' oracle runs are PALL's), {minutes:.1f} min here with "
              f"--jobs {args.jobs} (reused records cost nothing); "
              + _left_out(runs, shadow_runs, methods, len(seeds), shadows))
    stem = args.report_dir / (f"audit_{config['benchmark']}" + ("_quick" if args.quick else ""))
    title = (f"Exactness audit — {config['benchmark']}"
             + (" (quick look, plain configuration)" if args.quick else " (powered setting)"))
    preamble = provenance(runs["unlearned"], title=title, command=run.command,
                          notes=(sequences, effort,
                                 *_notes(summary, REFERENCE_SEED_OFFSET,
                                        permutations),
                                 f"Records: `{args.out}`"))
    print(write_report(stem, preamble=preamble, numbers=frame, cells=_cells(frame),
                       caption="Exactness audit: unlearned vs never-learned models"))


def cli(argv=None) -> None:
    main_guard(main, argv, prog=Path(__file__).name)


if __name__ == "__main__":
    cli()
