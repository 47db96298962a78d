"""The contract a method must keep to be run by the harness, checked on digits in seconds.

    python -m pall_avalanche.check_method NAME [--plugin FILE_OR_MODULE ...] [--seed K]
        [--device cuda]

prints one line per check (``ok`` or ``FAIL`` with what was seen) and exits 0 when all pass,
1 when one fails, 2 on bad input. ``tests/contract/test_check_method.py`` runs the same checks for
every registered method. On the sequence L0 L1 L2 U2 (:data:`CHECK_REQUESTS`):

- **keys**: every key the method declares is a keyword parameter of its strategy's
  constructor (following ``**kwargs`` up
  the bases), so a misspelt declaration fails here and not deep inside a run;
- **learns**: every learning request leaves its task above chance on its training data (the
  measurement's learning check);
- **lifecycle**: every request ends in exactly one ``after_request`` event, with its kind and
  task, in order;
- **resume**: a run stopped after its second request and resumed from its checkpoint gives
  the record of an uninterrupted run (accuracy matrix and parameters, bit for bit);
- **optimizer**: the optimizer the user passes is the one that trains, and a scheduler on it
  (Avalanche's ``LRSchedulerPlugin`` with ``StepLR``, halving per epoch) sets the learning
  rate of every epoch of every request;

and for a method registered ``exact=True``:

- **exact**: unlearning the last-learned task leaves the unlearned task near chance (at most
  chance plus half the gain over chance it had right after it was learned: a never-trained
  head on trained shared weights scores anywhere around chance, so one run cannot say more;
  the audit compares distributions over seeds) and every remaining task's predictions
  bit-identical — or, for a method that retrains its model from scratch
  on unlearning (``strategy.retrains_from_scratch()``, ER (Retraining)), changes every
  parameter;
- **provenance**: where the audit's run-time provenance tracking applies (subnetwork methods),
  every entry trained with the unlearned task's data or buffer was re-drawn.

A method that claims exactness and fails is reported as such.

With ``--device`` (a GPU) every run trains there, in deterministic mode (``deterministic``:
torch's deterministic algorithms), so that the bit-for-bit checks (resume, remaining tasks)
can hold; an operation without a deterministic kernel is named in one line.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass

from pall_avalanche.catalog import METHOD_INFO
from pall_avalanche.cli import Parser, check_device, parse_run_arguments, seed_option
from pall_avalanche.config import apply_overrides, check_run_config, for_benchmark
from pall_avalanche.exit_codes import main_guard
from pall_avalanche.requests import RequestKind

__all__ = ["CHECK_OVERRIDES", "CHECK_REQUESTS", "Check", "check_method", "main"]

#: The checked sequence: three tasks learned, the last one unlearned.
CHECK_REQUESTS = ((RequestKind.LEARN, 0), (RequestKind.LEARN, 1), (RequestKind.LEARN, 2),
                  (RequestKind.UNLEARN, 2))
#: The digits configuration's keys the checks change (a few seconds per method).
CHECK_OVERRIDES = {"epochs": 3, "train_per_task": 80, "n_unlearn": 1}


@dataclass(frozen=True)
class Check:
    """One check's outcome: its name, whether it passed, and what was seen."""

    name: str
    passed: bool
    detail: str

    def __str__(self) -> str:
        return f"{'ok  ' if self.passed else 'FAIL'} {self.name}: {self.detail}"


def check_method(method: str, *, seed: int = 0, device: str = "cpu") -> list[Check]:
    """Run every check of the contract (module docstring) on ``method``, training on
    ``device`` (deterministic algorithms on a device other than the CPU).

    :raises ValueError: ``method`` is not registered.
    """
    if method not in METHOD_INFO:
        raise ValueError(f"unknown method {method!r}; valid: {', '.join(METHOD_INFO)} "
                         "(a plugin registers more: --plugin)")
    config = apply_overrides(for_benchmark("digits"), CHECK_OVERRIDES.items())
    config["alpha"] = 1 / config["n_tasks"]
    if device != "cpu":
        config["deterministic"] = True
    resolved = check_run_config(config, method)
    from pall_avalanche.check_method.checks import run_contract  # torch only once the input is good

    return run_contract(method, resolved, seed, CHECK_REQUESTS, exact=METHOD_INFO[method].exact,
                        device=device)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m pall_avalanche.check_method NAME``: run the contract's checks on a
    registered method, print one line per check and return 0 when all pass.

    :raises RuntimeError: a check failed (the command exits 1).
    """
    parser = Parser(prog="check_method", description=__doc__.split("\n\n")[0],
                    epilog=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("method", help="the registered method to check")
    parser.add_argument("--plugin", dest="extensions", action="append", default=[],
                        metavar="MODULE_OR_FILE",
                        help="load an extension (a module or file registering methods) first "
                             "(repeatable)")
    parser.add_argument("--seed", type=seed_option, default=0, help="the seed (default 0)")
    parser.add_argument("--device", default="cpu",
                        help="where the runs train: cpu (default), cuda, cuda:N (deterministic "
                             "algorithms there)")
    args = parse_run_arguments(parser, argv)
    check_device(args.device)
    checks = check_method(args.method, seed=args.seed, device=args.device)
    for check in checks:
        print(check)
    failed = [c.name for c in checks if not c.passed]
    claim = " (registered exact=True)" if METHOD_INFO[args.method].exact else ""
    print(f"{args.method}{claim}: " + (f"FAILED {', '.join(failed)}" if failed else
                                         f"all {len(checks)} checks passed"))
    if failed:
        raise RuntimeError(f"method {args.method!r} fails the contract: {', '.join(failed)}")
    return 0


def cli(argv: Sequence[str] | None = None) -> None:
    """The command ``pall-check-method``: :func:`main` with one-line errors."""
    main_guard(main, argv, prog="check_method")


if __name__ == "__main__":
    cli()
