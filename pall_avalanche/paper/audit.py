"""Exactness audit: could an adversary tell that task t was learned and then unlearned?

    python benchmarks/audit.py                          # digits, every audited method
    python benchmarks/audit.py --quick                  # a first look in a few minutes
    python benchmarks/audit.py --hard                   # the harder setting (CNN, 30 per task)
    python benchmarks/audit.py --seeds 0 1 2 3 --shadows 32 --methods pall,independent
    python benchmarks/audit.py --requests seq.json      # another audited sequence

Two experiments per method, all records in ``--out`` and reused on reruns:

- Eq. 1 (:mod:`pall_avalanche.audit.oracle`): per seed, the unlearned model on R, an oracle on
  R′ (t never learned) and a reference oracle: distinguisher AUC, JS and MIA gaps, provenance,
  relapse (the rise of t's accuracy after its unlearning) and the relearning attack (few-shot
  fine-tuning of t against the oracle's);
- the per-example IN/OUT attack (:mod:`pall_avalanche.audit.shadows`): ``--shadows`` runs that
  learn t on random halves of D^t and unlearn it, attacked example by example (AUC, TPR at 1 %
  and 0.1 % FPR), with the same attack on never-learned oracles as control.

The table with one verdict per method (:mod:`pall_avalanche.audit.verdict`) is printed and
written to ``<report-dir>/audit_<benchmark>[_hard].{md,csv,tex}``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
import warnings
from pathlib import Path

import pandas as pd

from pall_avalanche.catalog import (
    AUDIT_FOLDS,
    AUDIT_REFERENCE_SEED_OFFSET,
    AUDIT_REQUESTS,
    METHOD_INFO,
    method_label,
)
from pall_avalanche.cli import (
    FLAG_KEYS,
    Parser,
    add_run_arguments,
    config_from_args,
    main_guard,
    parse_methods,
    parse_run_arguments,
    program_name,
    run_options,
)
from pall_avalanche.config import CONFIG_DIR
from pall_avalanche.reports import provenance, write_report
from pall_avalanche.requests import Request, RequestSequence

AUDIT_METHODS = ("sequential,ewc,derpp,lsf,packnet,wsn,independent,pall,pall_beta0,pall_strict,"
                 "er_retrain")


def _notes(reference_seed_offset: int) -> tuple[str, ...]:
    """The report's notes on the audit's measures."""
    return (
        "IN/OUT attack (per example, U-LiRA style): shadow runs learn the audited task t on a "
        "random half of its training set and unlearn it; per example, the logit-scaled "
        "confidence of its label under t's head and under every later task's head is fitted "
        "with Gaussians over the other runs where it was IN and where it was OUT; AUC and TPR "
        "at 1 % / 0.1 % FPR of the likelihood ratios; task level: the mean over runs of each "
        "run's own IN-vs-OUT AUC; 95 % percentile bootstrap resampling runs and examples "
        "(1,000 resamples). Control: the same attack on oracles that never learned t. "
        "Exact = 0.5 (TPR = FPR).",
        "Eq. 1 distinguisher: logistic regression, 5-fold CV, on summary features of the final "
        "model's outputs on t's training inputs (all heads / t's head only), unlearned vs "
        "never-learned; AUC with a 95 % percentile bootstrap over seeds (2,000 resamples). "
        f"JS and MIA gaps against a reference oracle (training seed +{reference_seed_offset}) "
        "are in the CSV.",
        "Relapse: after t's unlearning, the largest rise of t's test accuracy over the rest of "
        "the sequence (points; mean over seeds with a Student-t interval, the worst record in "
        "brackets). Relearning: the final model fine-tuned on k samples per class of t (SGD, "
        "lr 0.05, 30 full-batch steps; t's head rows only, or every parameter) against the "
        "oracle fine-tuned the same way; Δacc = accuracy gap (points) after 10 steps, mean "
        "over seeds with a Student-t interval (steps-to-threshold gaps in the CSV).",
        "Provenance (subnetwork methods): every entry trained with D^t or B^t re-drawn; "
        "'FAIL (k/n)': k of n unlearning requests over the seeds (the strict check is in the "
        "CSV).",
        "Verdict: 'leaks D^t' when the IN/OUT attack's task-level AUC or TPR at 1 % FPR lies "
        "above the diagonal; 'leaves a signature, not of D^t' when only Eq. 1's distinguisher "
        "(all heads) does; 'no leak found' when neither does at this power.",
    )


def _cells(frame: pd.DataFrame) -> pd.DataFrame:
    from pall_avalanche.audit import interval_cell

    rows = frame.to_dict("records")

    def known(row: dict, name: str) -> bool:
        return all(row.get(key) == row.get(key) and row.get(key) is not None
                   for key in (name, f"{name}_low", f"{name}_high"))

    def cell(name: str, digits: int, scale: float = 1.0) -> list[str]:
        keys = (name, f"{name}_low", f"{name}_high")
        return [interval_cell({k: r[k] * scale for k in keys}, name, digits)
                if known(r, name) else "n/a" for r in rows]

    worst = [f" ({r['relapse_max']:.2f})" if r.get("relapse_max") == r.get("relapse_max")
             and r.get("relapse_max") is not None else "" for r in rows]
    return pd.DataFrame({
        "Method": [method_label(r["method"]) for r in rows],
        "Verdict": [r["verdict"] for r in rows],
        "IN/OUT AUC (per example)": cell("attack_auc", 2),
        "TPR % at 1 % FPR": cell("attack_tpr@0.01", 1, 100),
        "TPR % at 0.1 % FPR": cell("attack_tpr@0.001", 1, 100),
        "IN/OUT AUC (task level)": cell("attack_inout_auc", 2),
        "Control AUC (oracles)": cell("control_auc", 2),
        "Eq. 1 AUC (all heads)": cell("auc", 2),
        "Eq. 1 AUC (t's head)": cell("auc_head", 2),
        "Provenance": [r["provenance"] if isinstance(r.get("provenance"), str) else "n/a"
                       for r in rows],
        "Relapse (worst)": [c + w for c, w in zip(cell("relapse", 2), worst, strict=True)],
        "Relearning Δacc, k=5, head": cell("relearn_k5_head_acc_gap", 1),
        "Relearning Δacc, k=20, all": cell("relearn_k20_all_acc_gap", 1),
        "A_l": [f"{r['A_l']:.2f} ± {r['A_l_std']:.2f}" if r.get("A_l") == r.get("A_l")
                and r.get("A_l") is not None else "n/a" for r in rows],
    })


def _widths(frame: pd.DataFrame) -> str:
    """The widest AUC interval of the table: the audit's resolution."""
    halves = {name: float(((frame[f"{name}_high"] - frame[f"{name}_low"]) / 2).max())
              for name in ("auc", "attack_auc", "attack_inout_auc", "control_auc")}
    widest = max(halves, key=halves.get)
    status = ("every AUC interval is within ±0.05" if halves[widest] <= 0.05 else
              f"not every AUC interval is within ±0.05: the widest is ±{halves[widest]:.3f} "
              f"({widest}; more seeds or shadow runs narrow it)")
    return ("Interval half-widths (widest over methods): "
            + ", ".join(f"{name} ±{half:.3f}" for name, half in halves.items())
            + f"; {status}")


#: ``--quick``: seeds and shadow runs of a first look (a few minutes on 2 cores).
QUICK = {"seeds": 6, "shadows": 16}
#: The committed audit's defaults: 32 seeds for Eq. 1, 64 shadow runs per method and role.
DEFAULT_SEEDS, DEFAULT_SHADOWS = 32, 64
#: ``--hard``: the digits CNN with 30 training samples per task (15 per class), 40 epochs (one
#: step each): few samples, memorised, and tasks no longer all near 98 %.
HARD = (("model", "cnn"), ("train_per_task", 30), ("epochs", 40))


def main(argv=None) -> None:
    parser = Parser(prog="audit.py", description=__doc__.split("\n\n")[0],
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(parser, default_out="results/audit")
    parser.set_defaults(methods=AUDIT_METHODS)
    parser.add_argument("--shadows", type=int, default=None,
                        help=f"shadow runs per method and role of the IN/OUT attack (default "
                             f"{DEFAULT_SHADOWS}; --quick {QUICK['shadows']}; at least 4)")
    parser.add_argument("--quick", action="store_true",
                        help=f"a first look: {QUICK['seeds']} seeds, {QUICK['shadows']} shadow "
                             "runs (unless --seeds / --shadows say otherwise)")
    parser.add_argument("--hard", action="store_true",
                        help="the harder setting: " + ", ".join(f"{k}={v}" for k, v in HARD)
                             + " where the command line does not set them (report "
                               "audit_<benchmark>_hard, records under results/audit_hard)")
    args = parse_run_arguments(parser, argv)
    if args.shadows is not None and args.shadows < 4:
        raise ValueError(f"--shadows {args.shadows}: at least 4 shadow runs are needed (every "
                         "example needs IN and OUT runs besides the attacked one)")
    methods = parse_methods(args.methods)
    if args.hard:   # the preset's keys, unless the command line sets them
        given = {text.partition("=")[0].strip() for text in args.overrides}
        given |= {key for key in FLAG_KEYS if getattr(args, key, None) is not None}
        args.overrides = [*(f"{k}={v}" for k, v in HARD if k not in given), *args.overrides]
    if args.hard and args.out == Path("results/audit"):
        args.out = Path("results/audit_hard")
    seeds_given = args.seeds is not None
    config, seeds, requests = config_from_args(args, CONFIG_DIR)
    if not seeds_given:
        seeds = list(range(QUICK["seeds"] if args.quick else DEFAULT_SEEDS))
    shadows = args.shadows or (QUICK["shadows"] if args.quick else DEFAULT_SHADOWS)
    if args.n_unlearn is not None:
        raise ValueError(f"--n-unlearn={args.n_unlearn} does not apply: the audit replays the "
                         f"fixed sequence {' '.join(AUDIT_REQUESTS)} or --requests FILE")
    if len(seeds) < AUDIT_FOLDS:
        warnings.warn(f"--seeds: {len(seeds)} seed(s) are too few for the audit's {AUDIT_FOLDS}-"
                      "fold cross-validation and bootstrap intervals over seeds (the intervals "
                      "degenerate; an AUC may even fall outside its own interval); use at least "
                      f"{AUDIT_FOLDS} seeds (the committed report uses {DEFAULT_SEEDS})",
                      UserWarning, stacklevel=2)
    # torch and Avalanche only once the input is known to be good
    from pall_avalanche.audit import audit_rows, oracle_sequence, run_audit
    from pall_avalanche.audit.shadows import attack_rows, run_shadows
    from pall_avalanche.audit.verdict import verdict

    if requests is None:
        requests = RequestSequence([Request("learn" if r[0] == "L" else "unlearn", int(r[1:]))
                                    for r in AUDIT_REQUESTS], config["n_tasks"])
    oracle, _ = oracle_sequence(requests)
    started = time.perf_counter()
    options = run_options(args)
    runs = run_audit(methods, seeds, config, args.out, requests=requests, **options)
    shadow_runs = run_shadows(methods, shadows, config, args.out, requests=requests,
                              seed=seeds[0], **options)
    minutes = (time.perf_counter() - started) / 60
    attacks = attack_rows(shadow_runs, methods)
    rows = []
    for row in audit_rows(runs, methods):
        row = {**row, **attacks[row["method"]]}
        measured = all(f"{name}_low" in row for name in ("auc", "attack_inout_auc",
                                                          "control_inout_auc"))
        row["verdict"] = (verdict(row, exact=METHOD_INFO[row["method"]].exact) if measured
                          else "not measured: its runs diverged")
        rows.append(row)
    frame = pd.DataFrame(rows)
    command = (program_name("python benchmarks/audit.py") + " "
               + shlex.join(sys.argv[1:] if argv is None else argv))
    sequences = (f"Audited sequence R: {' '.join(map(str, requests))}; oracle R′: "
                 f"{' '.join(map(str, oracle))}")
    done = [r["method"] for v in (*runs.values(), *shadow_runs.values()) for r in v]
    n_records = len(done)
    diverged = {m: 3 * len(seeds) + 2 * shadows - done.count(m) for m in methods}
    left_out = "; ".join(f"{method_label(m)}: {n} run(s) diverged and are left out (their "
                         "seeds are dropped from Eq. 1's pairs)" for m, n in diverged.items() if n)
    effort = (f"Evidence: Eq. 1 on {len(seeds)} seeds; the IN/OUT attack on {shadows} shadow "
              f"runs per method and role (each target example IN in about {shadows // 2}); "
              f"{n_records} records, {minutes:.1f} min here (reused records cost nothing)"
              + (f". {left_out}" if left_out else ""))
    stem = args.report_dir / (f"audit_{config['benchmark']}" + ("_hard" if args.hard else ""))
    preamble = provenance(runs["unlearned"], title=f"Exactness audit — {config['benchmark']}"
                          + (" (harder setting)" if args.hard else ""),
                          command=command.strip(),
                          notes=(sequences, effort, *_notes(AUDIT_REFERENCE_SEED_OFFSET),
                                 _widths(frame), f"Records: `{args.out}`"))
    print(write_report(stem, preamble=preamble, numbers=frame, cells=_cells(frame),
                       caption="Exactness audit: unlearned vs never-learned models"))


def cli(argv=None) -> None:
    main_guard(main, argv, prog=Path(__file__).name)


if __name__ == "__main__":
    cli()
