"""Exactness audit: could an adversary tell that task t was learned and then unlearned?

    python benchmarks/audit.py --jobs 2                 # the powered setting (76 min, 2 cores)
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
  (:mod:`pall_avalanche.audit.exposure`);
- the canary runs (:mod:`pall_avalanche.audit.canaries`): per method and seed of the first
  ``--canary-seeds``, R with ``--canaries`` random-label inputs each added to t's training set
  with probability 1/2; the included against the others after t's unlearning (TPR at 0.1 %
  FPR on about a thousand negatives).

Every method is judged by its own plan (:mod:`pall_avalanche.audit.plans`): two primary tests
and the positive control of its kind of model (its unlearning changes nothing), which runs
beside it and says whether the attack has power for it, and the leaky variants of its kind
(:mod:`pall_avalanche.strategies.leaky`, :mod:`pall_avalanche.strategies.controls`), which
say how small a leak of that kind's channels the attack detects; the controls' and
variants' shadow experiment is replicated at the next seeds (``--replications``) for the
spread of those leaks. Per method a data-swap pair (:mod:`pall_avalanche.audit.swapped`)
adds white-box evidence. The table with one verdict per method
(:mod:`pall_avalanche.audit.verdict`; its text, :mod:`pall_avalanche.paper.audit_report`)
is printed and written to ``<report-dir>/audit_<benchmark>[_quick].{md,csv,tex}``.
"""

from __future__ import annotations

import math
import time
import warnings
from collections import Counter
from pathlib import Path

import pandas as pd

from pall_avalanche.audit.plans import instrument_names, instruments_needed
from pall_avalanche.audit.protocol import (
    AUDIT_REQUESTS,
    N_FOLDS,
    N_PERMUTATIONS,
    REFERENCE_SEED_OFFSET,
)
from pall_avalanche.catalog import method_label
from pall_avalanche.cli import run_options
from pall_avalanche.exit_codes import main_guard
from pall_avalanche.paper.audit_report import cells, notes
from pall_avalanche.paper.kit import script_parser, start_script
from pall_avalanche.reports import provenance, write_report
from pall_avalanche.requests import RequestSequence

AUDIT_METHODS = ("sequential,ewc,derpp,lsf,packnet,wsn,independent,pall,pall_beta0,pall_strict,"
                 "er_retrain")


def _with_instruments(methods: list[str], leaks: bool = True) -> list[str]:
    """``methods`` and the instruments their plans name: the positive control and (with
    ``leaks``) the leaky variants of each one's kind of model."""
    return [*methods, *instruments_needed(methods, leaks=leaks)]


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
#: The canary runs: canaries per run and runs (seeds) per method; about half of the canaries
#: are left out, so the default's 2,000 give about 1,000 negatives (TPR at 0.1 % FPR).
DEFAULT_CANARIES, DEFAULT_CANARY_SEEDS = 500, 4
#: The shadow experiment of the positive controls and leaky variants, replicated at the next
#: seeds (another class split, initialisation and so model each), and the permutations per
#: test of a replication: the spread of the detected leaks (never part of a verdict).
DEFAULT_REPLICATIONS, REPLICATION_PERMUTATIONS = 3, 2_000
#: ``--quick``: plain digits (its configuration as it is but for :data:`QUICK_SETTING`), few
#: seeds and shadow runs: a first look in a few minutes.
QUICK = {"seeds": 6, "shadows": 8, "canary_seeds": 2}
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
                             "--seeds / --shadows say otherwise, the positive controls without "
                             "the leaky variants (report "
                             "audit_<benchmark>_quick, records under results/audit_quick)")
    parser.add_argument("--canaries", type=int, default=DEFAULT_CANARIES,
                        help=f"canaries per canary run (default {DEFAULT_CANARIES}; 0: no "
                             "canary runs; else at least 2)")
    parser.add_argument("--canary-seeds", type=int, default=None,
                        help=f"canary runs per method, at the first seeds (default "
                             f"{DEFAULT_CANARY_SEEDS}; --quick {QUICK['canary_seeds']}; at "
                             "least 2)")
    parser.add_argument("--replications", type=int, default=None,
                        help=f"shadow experiments of the positive controls and leaky variants, "
                             f"the first seed's included, each at the next seed (default "
                             f"{DEFAULT_REPLICATIONS}; --quick 1: none beside the first)")
    parser.add_argument("--permutations", type=int, default=None,
                        help=f"permutations per test (default {DEFAULT_PERMUTATIONS}; --quick "
                             f"{N_PERMUTATIONS}; at least 40: a method's two tests / 0.05)")
    run = start_script(parser, argv, script="benchmarks/audit.py")
    args, config, requests = run.args, run.config, run.requests
    if args.shadows is not None and args.shadows < 4:
        raise ValueError(f"--shadows {args.shadows}: at least 4 shadow runs are needed (every "
                         "example needs IN and OUT runs besides the attacked one)")
    methods = _with_instruments(run.methods, leaks=not args.quick)
    for key, value in QUICK_SETTING if args.quick else POWERED:
        run.default(key, value)    # the setting's keys, unless the command line sets them
    if args.quick:
        args.out, args.report_dir = quick_folders(args.out, args.report_dir)
    seeds = (run.seeds if args.seeds is not None
             else list(range(QUICK["seeds"] if args.quick else DEFAULT_SEEDS)))
    shadows = args.shadows or (QUICK["shadows"] if args.quick else DEFAULT_SHADOWS)
    replications = (args.replications if args.replications is not None
                    else 1 if args.quick else DEFAULT_REPLICATIONS)
    if not 1 <= replications <= len(seeds):
        raise ValueError(f"--replications {replications}: must lie in 1..{len(seeds)} (one "
                         "seed per replication, among --seeds)")
    if args.canaries == 1 or args.canaries < 0:
        raise ValueError(f"--canaries {args.canaries}: use 0 (no canary runs) or at least 2")
    n_canary = (args.canary_seeds if args.canary_seeds is not None
                else min(len(seeds), QUICK["canary_seeds"] if args.quick else DEFAULT_CANARY_SEEDS))
    if args.canaries and not 2 <= n_canary <= len(seeds):
        raise ValueError(f"--canary-seeds {n_canary}: must lie in 2..{len(seeds)} (one canary "
                         "run per seed, among --seeds), or no canary runs: --canaries 0")
    canary_seeds = seeds[:n_canary]
    replicated_methods = [m for m in methods if m in instrument_names()]
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
    from pall_avalanche.audit.canaries import canary_specs, run_canaries
    from pall_avalanche.audit.shadows import run_shadows, shadow_specs
    from pall_avalanche.audit.summary import FAMILY_SIZE, summarise
    from pall_avalanche.audit.swapped import run_swapped, swap_specs
    from pall_avalanche.audit.twins import runs_needed
    from pall_avalanche.audit.verdict import ALPHA
    from pall_avalanche.runs.pool import resolve_jobs
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
                                        seed=seeds[0]))
             + sum(runs_needed(shadow_specs(replicated_methods, shadows, config,
                                            requests=requests, seed=seed))
                   for seed in seeds[1:replications] if replicated_methods)
             + len(swap_specs(methods, config, requests=requests, seed=seeds[0]))
             + (len(canary_specs(methods, canary_seeds, args.canaries, config,
                                 requests=requests)) if args.canaries else 0))
    options = {**run_options(args), "overall": OverallProgress(total)}
    runs = run_audit(methods, seeds, config, args.out, requests=requests, **options)
    shadow_runs = run_shadows(methods, shadows, config, args.out, requests=requests,
                              seed=seeds[0], **options)
    replicated = {seed: run_shadows(replicated_methods, shadows, config, args.out,
                                    requests=requests, seed=seed, **options)
                  for seed in seeds[1:replications] if replicated_methods}
    swapped = run_swapped(methods, config, args.out, requests=requests, seed=seeds[0],
                          **options)
    canaries = (run_canaries(methods, canary_seeds, args.canaries, config, args.out,
                             requests=requests, **options) if args.canaries else [])
    # the permutation tests take minutes: a line per method and test as they end
    tests_bar = StageProgress(2 * len(methods), "tests", not args.quiet, names=str)
    summary = summarise(runs, shadow_runs, methods, swapped=swapped, canaries=canaries,
                        replicated=replicated,
                        replication_permutations=min(permutations, REPLICATION_PERMUTATIONS),
                        n_permutations=permutations, done=tests_bar.update,
                        jobs=resolve_jobs(args.jobs, len(methods), "cpu"))
    tests_bar.close()
    minutes = (time.perf_counter() - started) / 60
    frame = pd.DataFrame(summary.rows)
    sequences = (f"Audited sequence R: {' '.join(map(str, requests))}; oracle R′: "
                 f"{' '.join(map(str, oracle))}")
    n_records = sum(len(v) for v in (*runs.values(), *shadow_runs.values(), swapped, canaries,
                                     *(r for again in replicated.values()
                                       for r in again.values())))
    again = (f"; the positive controls' and leaky variants' shadow runs again at seed(s) "
             f"{', '.join(map(str, replicated))}" if replicated else "")
    canary_note = (f"{len(canary_seeds)} canary runs per method (seeds "
                   f"{', '.join(map(str, canary_seeds))}), {args.canaries} canaries each"
                   if args.canaries else "no canary runs (--canaries 0)")
    effort = (f"Evidence: Eq. 1 on {len(seeds)} seeds; {shadows} shadow runs per method and "
              f"role (each target example IN in about {shadows // 2}){again}; a data-swap "
              f"pair per method; {canary_note}; {n_records} records (a variant's oracle "
              f"runs are its method's), {minutes:.1f} min here with "
              f"--jobs {args.jobs} (reused records cost nothing); "
              + _left_out(runs, shadow_runs, methods, len(seeds), shadows))
    stem = args.report_dir / (f"audit_{config['benchmark']}" + ("_quick" if args.quick else ""))
    title = (f"Exactness audit — {config['benchmark']}"
             + (" (quick look, plain configuration)" if args.quick else " (powered setting)"))
    preamble = provenance(runs["unlearned"], title=title, command=run.command,
                          notes=(sequences, effort,
                                 *notes(summary, REFERENCE_SEED_OFFSET,
                                        permutations),
                                 f"Records: `{args.out}`"))
    print(write_report(stem, preamble=preamble, numbers=frame, cells=cells(frame),
                       caption="Exactness audit: unlearned vs never-learned models"))


def cli(argv=None) -> None:
    main_guard(main, argv, prog=Path(__file__).name)


if __name__ == "__main__":
    cli()
