"""The continual-unlearning field in one table: the paper's methods and CLPU-DER++, the
Amnesiac baselines, HAT, Amnesiac HAT and UnCLe on one protocol, with the field's metrics.

    python benchmarks/table_field.py                        # digits, every method
    python benchmarks/table_field.py --benchmark cifar10 --device cuda --methods all,clpu_derpp
    python benchmarks/table_field.py --audit-report reports/audit_digits.csv

Two protocols (docs/fidelity.md, "The field"): the paper's (every task temporary, N_u
unlearning requests drawn per seed) and CLPU's (``--unlearnable-age N``: a task can be
unlearned until N tasks were learned after it and becomes permanent when task t + N starts,
CLArena's ``unlearnable_age``; the same draws from fewer positions; ``--requests`` replays one
sequence instead, the only protocol then).
For every method, protocol and seed the script runs three ordinary
records (reused, ``--jobs``): the run itself, the retrained reference and the never-unlearned
reference. By default the references are CLArena's (``--references continual``): the
method's continual-learning run with unlearning switched off, every task but the unlearned
ones, or every task, learned permanently (CLPU-DER++'s is DER++, Amnesiac HAT's is HAT
without backups); ``--references protocol`` runs the sequence itself without any request of
the unlearned tasks (the exactness audit's oracle) and without its unlearning requests (under
CLPU's protocol the unlearned tasks become permanent there as the others do).
Columns: A_l, A_u, F_l, F_u (the paper's), the feature distance of the unlearned tasks'
backbone features to the retrained reference (euclidean, cosine, 1 − linear CKA), the
accuracy gain of the remaining tasks over the never-unlearned reference, ToW against the
retrained reference with its 95 % t-interval over seeds, the final inference model size, the
mean time per request, the exactness the method is registered with and, given an audit report
(``benchmarks/audit.py``'s CSV), the audit's verdict. PALL runs at α = 1/T. Writes
table_field_<benchmark>.{md,csv,tex} beside the records (--out) or into --report-dir.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pandas as pd

from pall_avalanche.catalog import ABLATION_METHODS, FIELD_METHODS, TABLE1_METHODS
from pall_avalanche.cli import run_options
from pall_avalanche.evaluation.field import (
    FIELD_METRICS,
    REFERENCE_FORMS,
    field_metrics,
    reference_sequences,
)
from pall_avalanche.evaluation.metrics import t_interval
from pall_avalanche.exit_codes import main_guard
from pall_avalanche.paper.kit import finish_report, script_parser, start_script
from pall_avalanche.reports import format_mean_std, format_table, summary_frame
from pall_avalanche.runs.spec import plan, probe_modules
from pall_avalanche.runs.wandb_logging import default_group

NAME = "table_field"
#: How the report names each form of the reference runs.
_FORMS = {"continual": "CLArena's (--references continual: the method with unlearning off, "
                       "every task learned permanently; CLPU-DER++'s is DER++, Amnesiac "
                       "HAT's is HAT without backups)",
          "protocol": "on the run's own protocol (--references protocol: its sequence without "
                      "the unlearned tasks' requests, and without its unlearning requests)"}
#: The protocols' labels.
PAPER, CLPU = "paper", "CLPU"


def _verdicts(paths: list[str] | None) -> dict[str, str]:
    """method → the audit's verdict, from audit reports' CSVs (a later file's verdict wins;
    empty without one)."""
    verdicts: dict[str, str] = {}
    for path in paths or ():
        try:
            with open(path, newline="") as handle:
                rows = list(csv.DictReader(handle))
        except OSError as err:
            raise ValueError(f"--audit-report {path}: cannot read it ({err.strerror})") from None
        if not rows or not {"method", "verdict"} <= set(rows[0]):
            raise ValueError(f"--audit-report {path}: not an audit report's CSV (it needs the "
                             "columns method and verdict; benchmarks/audit.py writes one)")
        verdicts.update((row["method"], row["verdict"]) for row in rows)
    return verdicts


def main(argv=None) -> str:
    parser = script_parser(__doc__, name=NAME,
                           default_methods=(*TABLE1_METHODS, *ABLATION_METHODS, *FIELD_METHODS))
    parser.add_argument("--unlearnable-age", type=int, default=2, metavar="N",
                        help="the CLPU protocol's age N: a task can be unlearned until N "
                             "tasks were learned after it, and becomes permanent when task "
                             "t + N starts (1 .. n_tasks - 1; default 2)")
    parser.add_argument("--references", choices=REFERENCE_FORMS, default=REFERENCE_FORMS[0],
                        help="the reference runs: continual (CLArena's: the method with "
                             "unlearning off, every task learned permanently) or protocol "
                             "(the run's own sequence without the unlearned tasks' requests, "
                             "and without its unlearning requests); default continual")
    parser.add_argument("--audit-report", metavar="CSV", action="append",
                        help="an exactness audit's CSV (benchmarks/audit.py) whose verdicts "
                             "fill the audit column; repeatable (a later file's verdict wins)")
    run = start_script(parser, argv, script=f"benchmarks/{NAME}.py")
    age = run.args.unlearnable_age
    if not 1 <= age < run.n_tasks:
        raise ValueError(f"--unlearnable-age {age} is invalid; valid: 1 .. {run.n_tasks - 1} "
                         f"(n_tasks is {run.n_tasks})")
    verdicts = _verdicts(run.args.audit_report)
    run.default("alpha", 1 / run.n_tasks)
    from pall_avalanche.evaluation.references import FieldProbe  # torch: once something runs
    from pall_avalanche.runs.batch import run_specs

    modules = probe_modules(FieldProbe)
    triples = []
    protocols = [(PAPER, [("unlearnable_age", None)]), (CLPU, [("unlearnable_age", age)])]
    if run.requests is not None:        # one sequence given: one protocol, the given one
        protocols = [(f"{run.args.requests}", [])]
    for label, overrides in protocols:
        generated_with = dict(overrides).get("unlearnable_age")
        for spec in plan(run.methods, run.seeds, run.config, overrides=overrides,
                         requests=run.requests, modules=modules):
            try:
                sequences = reference_sequences(spec.sequence, run.args.references,
                                                generated_with)
            except ValueError as err:   # only a given sequence can unlearn every task
                raise ValueError(f"--requests {err}") from None
            # a replayed sequence does not depend on the age it was generated with, so CLArena's
            # references (without the age's make-permanent requests) serve both protocols
            age_of_reference = (overrides if run.args.references == "protocol"
                                else [("unlearnable_age", None)])
            retrained, never = (
                plan([spec.method], [spec.seed], run.config, overrides=age_of_reference,
                     requests=sequence, modules=modules)[0]
                for sequence in sequences)
            triples.append((label, spec, retrained, never))
    unique = list(dict.fromkeys(s for _, *specs in triples for s in specs))
    options = {**run_options(run.args), "checkpoints": False}
    # a diverged run is left out (named in run.left_out) with the triples it belongs to
    computed = {(r["method"], r["seed"], r["config_hash"]): r
                for r in run_specs(unique, run.args.out, group=default_group(run.config),
                                   stats=run.stats, probe=FieldProbe, skip_diverged=True,
                                   left_out=run.left_out, **options)}

    def record(spec):
        return computed.get((spec.method, spec.seed, spec.hash))

    records = [{**record(spec), "point": label,
                "field": field_metrics(record(spec), record(retrained), record(never))}
               for label, spec, retrained, never in triples
               if all(record(s) is not None for s in (spec, retrained, never))]
    extra = {name: (lambda r, name=name: r["field"][name]) for name in FIELD_METRICS}
    extra["request_seconds"] = lambda r: float(np.mean(
        [t["seconds"] for t in r["timings"]["per_request"]]))
    frame = summary_frame(records, ("point", "method"), extra=extra)
    tows = [[r["field"]["tow"] for r in records
             if (r["point"], r["method"]) == (row.point, row.method)
             and r["field"]["tow"] is not None and not math.isnan(r["field"]["tow"])]
            for row in frame.itertuples()]
    intervals = [t_interval(values) if len(values) > 1 else None for values in tows]
    frame["tow_low"] = [None if i is None else i[1] for i in intervals]
    frame["tow_high"] = [None if i is None else i[2] for i in intervals]
    frame["audit_verdict"] = [verdicts.get(m, "") for m in frame["method"]]
    return finish_report(
        run, records, name=NAME, numbers=frame, cells=_cells(frame, bool(verdicts)),
        title=f"The continual-unlearning field ({run.config['benchmark']}, T={run.n_tasks})",
        notes=[f"Protocols: {PAPER} (every task temporary) and {CLPU} (unlearnable_age = "
               f"{age}); per method, protocol and seed a retrained and a never-unlearned "
               f"reference run, {_FORMS[run.args.references]} (docs/fidelity.md, \"The "
               "field\")",
               f"PALL α = {run.value('alpha'):g}; mean ± std over seeds; ToW mean [95 % "
               "t-interval]; DD: feature distance of the unlearned tasks' backbone features "
               "to the retrained reference; AG: accuracy gain of the remaining tasks over the "
               "never-unlearned reference (points)",
               *([f"Audit: the verdict of {', '.join(run.args.audit_report)} (the exactness "
                  "audit's own powered setting and sequence, not these runs; a later file "
                  "wins); 'not audited' where none judged the method"] if verdicts else []),
               *(["A run whose reference diverged is left out with it"] if run.left_out
                 else [])])


def _cells(frame: pd.DataFrame, audited: bool) -> pd.DataFrame:
    """The formatted table: one row per protocol and method (the paper's metrics as Table 1
    prints them: an exact method's A_u as *Exact* (x), a row with failed learning checks
    marked)."""
    def mean_std(name: str, digits: int = 2) -> list[str]:
        return [format_mean_std(row[f"{name}_mean"], row[f"{name}_std"], digits)
                for _, row in frame.iterrows()]

    def tow(row) -> str:
        if pd.isna(row["tow_mean"]):
            return "—"
        if row["tow_low"] is None or pd.isna(row["tow_low"]):      # one seed: no interval
            return f"{row['tow_mean']:.3f}"
        return f"{row['tow_mean']:.3f} [{row['tow_low']:.3f}, {row['tow_high']:.3f}]"

    cells = format_table(frame, {"A_l": "A_l", "A_u": "A_u", "F_l": "F_l", "F_u": "F_u"},
                         index={"point": "Protocol", "label": "Method"})
    cells = cells.assign(**{
        "DD eucl.": mean_std("dd_euclidean", 3), "DD cos.": mean_std("dd_cosine", 3),
        "1 − CKA": mean_std("dd_cka", 3), "AG": mean_std("accuracy_gain"),
        "ToW": [tow(row) for _, row in frame.iterrows()],
        "Size (MB)": [f"{v:.3f}" for v in frame["model_size_mb"]],
        "s / request": mean_std("request_seconds"),
        "Exact (registered)": ["yes" if e else "no" for e in frame["exact"]],
    })
    if audited:
        cells["Audit"] = [v or "not audited" for v in frame["audit_verdict"]]
    return cells


def cli(argv=None) -> None:
    main_guard(main, argv, prog=Path(__file__).name)


if __name__ == "__main__":
    cli()
