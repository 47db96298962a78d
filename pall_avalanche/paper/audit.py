"""Exactness audit: every unlearned model against models that never saw the unlearned task.

    python benchmarks/audit.py                          # digits, the audit's methods
    python benchmarks/audit.py --seeds 0 1 2 3 --methods pall,independent
    python benchmarks/audit.py --requests seq.json      # another audited sequence

Per method and seed three records (unlearned on R, oracle on R′, reference oracle on R′ with
other training randomness) go to ``--out`` and are reused on reruns; the table (distinguisher
AUC, JS gap, MIA gaps, provenance, with 95 % intervals; :mod:`pall_avalanche.audit`) is printed
and written to ``<report-dir>/audit_<benchmark>.{md,csv,tex}``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import warnings
from pathlib import Path

import pandas as pd

from pall_avalanche.catalog import (
    AUDIT_FOLDS,
    AUDIT_REFERENCE_SEED_OFFSET,
    AUDIT_REQUESTS,
    method_label,
)
from pall_avalanche.cli import (
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
        "Distinguisher: logistic regression, 5-fold CV, on summary features of the final model's "
        "outputs on the unlearned task's training inputs (all heads / the task's head only); "
        "AUC with a 95 % percentile bootstrap interval over seeds (2,000 resamples). 0.5 = "
        "indistinguishable from a model that never learned the task.",
        "JS gap: mean Jensen–Shannon divergence (bits) to a reference oracle (R′, training seed "
        f"+{reference_seed_offset}) of the unlearned model minus that of the oracle; MIA gap: "
        "membership-inference AUC (train vs held-out inputs of the unlearned task) on the "
        "unlearned model minus on the oracle, loss attack and feature attack; both with 95 % "
        "Student-t intervals over seeds. 0 = no leak.",
        "Provenance (subnetwork methods): every entry trained with D^t or B^t re-drawn (direct); "
        "strict also every entry trained while t's weights were in the forward pass and no stored "
        "logit computed with them. 'FAIL (k/n)': k of n unlearning requests over the seeds.",
    )


def _cells(frame: pd.DataFrame) -> pd.DataFrame:
    from pall_avalanche.audit import interval_cell

    rows = frame.to_dict("records")
    return pd.DataFrame({
        "Method": [method_label(r["method"]) for r in rows],
        "Distinguisher AUC (all heads)": [interval_cell(r, "auc", 2) for r in rows],
        "Distinguisher AUC (task's head)": [interval_cell(r, "auc_head", 2) for r in rows],
        "JS gap (bits)": [interval_cell(r, "js_gap", 4) for r in rows],
        "MIA gap, loss": [interval_cell(r, "mia_loss_gap", 3) for r in rows],
        "MIA gap, features": [interval_cell(r, "mia_feature_gap", 3) for r in rows],
        "Provenance": [r["provenance"] for r in rows],
        "Provenance (strict)": [r["provenance_strict"] for r in rows],
        "A_l": [f"{r['A_l']:.2f} ± {r['A_l_std']:.2f}" for r in rows],
        "Unlearning (s)": [f"{r['unlearn_seconds']:.3f}" for r in rows],
    })


def main(argv=None) -> None:
    parser = Parser(prog="audit.py", description=__doc__.split("\n\n")[0],
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(parser, default_out="results/audit")
    parser.set_defaults(methods=AUDIT_METHODS)
    args = parse_run_arguments(parser, argv)
    methods = parse_methods(args.methods)
    config, seeds, requests = config_from_args(args, CONFIG_DIR)
    if args.n_unlearn is not None:
        raise ValueError(f"--n-unlearn={args.n_unlearn} does not apply: the audit replays the "
                         f"fixed sequence {' '.join(AUDIT_REQUESTS)} or --requests FILE")
    if len(seeds) < AUDIT_FOLDS:
        warnings.warn(f"--seeds: {len(seeds)} seed(s) are too few for the audit's {AUDIT_FOLDS}-"
                      "fold cross-validation and bootstrap intervals over seeds (the intervals "
                      "degenerate; an AUC may even fall outside its own interval); use at least "
                      f"{AUDIT_FOLDS} seeds (the committed report uses 8)", UserWarning,
                      stacklevel=2)
    # torch and Avalanche only once the input is known to be good
    from pall_avalanche.audit import audit_rows, oracle_sequence, run_audit

    if requests is None:
        requests = RequestSequence([Request("learn" if r[0] == "L" else "unlearn", int(r[1:]))
                                    for r in AUDIT_REQUESTS], config["n_tasks"])
    oracle, _ = oracle_sequence(requests)
    runs = run_audit(methods, seeds, config, args.out, requests=requests, **run_options(args))
    frame = pd.DataFrame(audit_rows(runs, methods))
    command = (program_name("python benchmarks/audit.py") + " "
               + shlex.join(sys.argv[1:] if argv is None else argv))
    sequences = (f"Audited sequence R: {' '.join(map(str, requests))}; oracle R′: "
                 f"{' '.join(map(str, oracle))}")
    preamble = provenance(runs["unlearned"], title=f"Exactness audit — {config['benchmark']}",
                          command=command.strip(),
                          notes=(sequences, *_notes(AUDIT_REFERENCE_SEED_OFFSET),
                                 f"Records: `{args.out}`"))
    print(write_report(args.report_dir / f"audit_{config['benchmark']}", preamble=preamble,
                       numbers=frame, cells=_cells(frame),
                       caption="Exactness audit: unlearned vs never-learned models"))


def cli(argv=None) -> None:
    main_guard(main, argv, prog=Path(__file__).name)


if __name__ == "__main__":
    cli()
