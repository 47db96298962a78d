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

Every method is judged by its own plan (:mod:`pall_avalanche.audit.plans`): two primary tests
and the positive control of its kind of model (its unlearning changes nothing), which runs
beside it and says whether the attack has power for it; with PALL or a variant of it, the leaky
PALL variants (:mod:`pall_avalanche.strategies.leaky`) run too and say how small a leak of
PALL's channels the attack detects. The table with one verdict per method
(:mod:`pall_avalanche.audit.verdict`) is printed and written to
``<report-dir>/audit_<benchmark>[_quick].{md,csv,tex}``.
"""

from __future__ import annotations

import math
import time
import warnings
from collections import Counter
from pathlib import Path

import pandas as pd

from pall_avalanche.audit.plans import PALL_CHANNELS, controls_needed, plan_for
from pall_avalanche.audit.protocol import (
    AUDIT_REQUESTS,
    N_FOLDS,
    N_PERMUTATIONS,
    REFERENCE_SEED_OFFSET,
)
from pall_avalanche.catalog import AUDIT_LEAKS, method_label
from pall_avalanche.cli import run_options
from pall_avalanche.exit_codes import main_guard
from pall_avalanche.paper.kit import script_parser, start_script
from pall_avalanche.reports import provenance, write_report
from pall_avalanche.requests import RequestSequence

AUDIT_METHODS = ("sequential,ewc,derpp,lsf,packnet,wsn,independent,pall,pall_beta0,pall_strict,"
                 "er_retrain")


def _with_instruments(methods: list[str]) -> list[str]:
    """``methods`` and the instruments their verdicts need: the positive control each plan
    names and, when PALL or a variant of it is audited, the leaky PALL variants (leaks of its
    channels)."""
    out = [*methods, *controls_needed(methods)]
    if any(m in PALL_CHANNELS for m in methods):
        out += [m for m in AUDIT_LEAKS if m not in out]
    return out


def _notes(summary, reference_seed_offset: int, n_permutations: int) -> tuple[str, ...]:
    """The report's notes on the audit's measures and on what its verdicts rest on."""
    from pall_avalanche.audit.summary import FAMILY_SIZE
    from pall_avalanche.audit.verdict import ALPHA, EQUIVALENCE_MARGIN, SIMULTANEOUS_LEVEL

    rows = {r["method"]: r for r in summary.rows}

    def gap(method: str) -> str:
        row = rows[method]
        return (f"gap {row['leak_auc']:+.3f}, p {row['leak_auc_p_adj']:.3g}"
                if "leak_auc_p_adj" in row else "not measured")

    controls = dict.fromkeys(plan_for(m).control for m in rows)
    power = "; ".join(
        f"{plan_for(c).kind}: {method_label(c)} "
        + ("not run" if c not in rows else
           f"{'detected' if summary.powered.get(c) else 'NOT detected'} ({gap(c)})")
        for c in controls)
    leaks = summary.leaks_detected()
    found = [r for r in leaks if r["detected"]]
    channels = (
        "Leaks of known size (PALL's channels, one replication: one class split, one "
        "initialisation, one draw of the kept entries): "
        + "; ".join(f"{method_label(r['method'])}: {gap(r['method'])}"
                    f"{'' if r['detected'] else ' (not detected)'}" for r in leaks)
        + (f"; PALL itself (f = 0): {gap('pall')}" if "pall" in rows else "")
        + (f". The smallest leak detected: {method_label(found[-1]['method'])}, per-example "
           f"gap {found[-1]['leak_auc']:+.3f}." if found else ". None is detected.")
    ) if leaks else ("Leaks of known size: none run (they leak PALL's channels and run beside "
                     "PALL or a variant of it, none audited here; the other methods have no "
                     "leaky variants): the smallest detected leak is not measured.")
    resolution = (f"Resolution: the smallest adjusted p-value a primary test can reach is "
                  f"{summary.smallest_p:.3g}, Eq. 1's {summary.smallest_eq1_p:.3g} with "
                  f"{summary.n_seeds} seeds")
    if max(summary.smallest_p, summary.smallest_eq1_p) >= ALPHA:
        resolution += (f": at or above {ALPHA:g}, so some tests cannot detect anything here "
                       "(more permutations or seeds)")
    return (
        f"Families: every method is judged by its own two primary tests, the per-example attack "
        f"against its control and Eq. 1 (all heads), Holm-corrected together (family-wise "
        f"{ALPHA:g}, {FAMILY_SIZE} tests), so its verdict is the same whichever other methods "
        "the command audits; the task-level attack, Eq. 1 on t's head and KLoM are "
        "instruments, printed with their raw p-values and never a verdict. 'leaks D^t' and "
        "'distinguishable from never-learned' name the test that rejected; the second says the "
        "model differs from one that never learned t, not that the difference is D^t.",
        f"Power: per kind of model, its positive control (unlearning that changes nothing) "
        f"detected by its own per-example attack at family-wise {ALPHA:g}; a method whose "
        f"control is not detected is 'no power' — {power}.",
        f"Exact within ε: for a method registered exact, the per-example gap's simultaneous "
        f"upper bound (one-sided {SIMULTANEOUS_LEVEL:.1%}, so that both primary tests' bounds "
        f"hold together at {1 - ALPHA:.0%}) below ε = {EQUIVALENCE_MARGIN:g} AUC (half the "
        "smallest keep-everything gap the previous edition measured, Sequential's +0.091); "
        "'not shown' when it is not, 'NOT supported' when a primary test rejects. TPR at a low "
        "FPR is not part of the claim: t has too few examples to measure it (below).",
        channels,
        resolution + ".",
        f"Tests: permutation p-values ({n_permutations:,} permutations per test, the whole fit "
        "redone per permutation). 'p' of a primary test is adjusted within the method's "
        "family, of an instrument raw.",
        "Attacked: the shadow runs at the end and right after every unlearning request that a "
        "learning request follows (on R, after U1, before L4; the oracle runs at the aligned "
        "request, after L3): the model right after U1 is the final model of R without L4, a "
        "sequence in which no learning request follows the unlearning. A gap is the worse of "
        "the times (named in brackets), its null the largest gap under each permutation; the "
        "simultaneous bound covers both times. Eq. 1 and KLoM read the final models.",
        "IN/OUT attack (per example, U-LiRA style): shadow runs learn t on a random half of its "
        "training set and unlearn it; per example, the logit-scaled confidence of its label "
        "under t's head and every later task's head is fitted with Gaussians over the other "
        "runs where it was IN and where it was OUT (leave one run out); 'gap' = the attack's "
        "AUC minus the same attack's AUC on oracles that never learned t (the control); its "
        "null permutes every example's memberships across runs in both. TPR at an FPR is "
        "printed only where ≥ 10/FPR independent negatives (distinct target examples) carry "
        "it, else n/a.",
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
        "Provenance (subnetwork methods), white-box: 'direct' — every entry trained with D^t "
        "or B^t re-drawn; 'strict' — also every entry later tasks trained with t's weights in "
        "the forward pass, and no remaining buffer's logits computed with t present; 'FAIL "
        "(k/n)': k of n unlearning requests over the seeds. An entry that changes during t's "
        "unlearning request counts as re-drawn, also when that request retrained it with B^t "
        "(PALL keeping B^t in retraining passes 'direct').",
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

    def tested(name: str, bound: str | None = "bound") -> list[str]:
        out = []
        for r in rows:
            if not known(r, name, f"{name}_p_adj"):
                out.append("n/a")
                continue
            text = f"{r[name]:+.3f}" if name.startswith("leak") else f"{r[name]:.3f}"
            if known(r, f"{name}_time"):
                text += f" ({r[f'{name}_time']})"
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

    def power(row: dict) -> str:
        control = method_label(plan_for(row["method"]).control)
        return {True: control, False: f"none ({control} not detected)",
                None: f"not shown ({control} not run)"}[row.get("powered")]

    learned = [f"{r.get('not_learned', 0) + r.get('shadow_not_learned', 0)}/"
               f"{r.get('seeds', 0) + r.get('shadow_runs', 0)}" for r in rows]
    return pd.DataFrame({
        "Method": [method_label(r["method"]) for r in rows],
        "Verdict": [r["verdict"] for r in rows],
        "Power shown by": [power(r) for r in rows],
        "t not learned": learned,
        "IN/OUT AUC (per example)": interval("attack_auc", 3),
        "Control AUC": interval("control_auc", 3),
        "Gap to control, per example (primary; simultaneous bound)": tested("leak_auc"),
        "Eq. 1 AUC, all heads (primary)": tested("auc", None),
        "Gap to control, task level (instrument, raw p)": tested("leak_inout_auc", None),
        "TPR % at 1 % FPR": tpr(0.01),
        "Eq. 1 AUC, t's head (instrument, raw p)": tested("auc_head", None),
        "KLoM on t, median": [f"{r['klom_forget_q0.5']:.3f}" if known(r, "klom_forget_q0.5")
                              else "n/a" for r in rows],
        "KLoM on t, worst decile (instrument, raw p)": tested("klom_forget_q0.9", None),
        "Retained-set exposure Δ": interval("retained_change", 3),
        "Relapse (worst)": relapse("relapse"),
        "Oracle relapse (worst)": relapse("relapse_oracle"),
        "Relearning Δacc, k=5, head": interval("relearn_k5_head_acc_gap", 1),
        "Provenance, direct": [r["provenance"] if isinstance(r.get("provenance"), str)
                               else "n/a" for r in rows],
        "Provenance, strict": [r["provenance_strict"]
                               if isinstance(r.get("provenance_strict"), str) else "n/a"
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
#: permutations per test (a method's family of two reaches adjusted p 0.0002: a detection
#: near the bar does not hang on the null's draws, docs/fidelity.md "Resolution").
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
                             f"{N_PERMUTATIONS}; at least 40: a method's two tests / 0.05)")
    run = start_script(parser, argv, script="benchmarks/audit.py")
    args, config, requests = run.args, run.config, run.requests
    if args.shadows is not None and args.shadows < 4:
        raise ValueError(f"--shadows {args.shadows}: at least 4 shadow runs are needed (every "
                         "example needs IN and OUT runs besides the attacked one)")
    methods = _with_instruments(run.methods)
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
    from pall_avalanche.audit.summary import FAMILY_SIZE, summarise
    from pall_avalanche.audit.twins import runs_needed
    from pall_avalanche.audit.verdict import ALPHA
    from pall_avalanche.runs.progress import OverallProgress, StageProgress

    needed = math.ceil(FAMILY_SIZE / ALPHA)
    if permutations < needed:
        raise ValueError(f"--permutations {permutations}: too few for a family of "
                         f"{FAMILY_SIZE} tests at family-wise {ALPHA:g} (the smallest adjusted "
                         f"p-value is {FAMILY_SIZE} / (permutations + 1)); use at least {needed}")
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
