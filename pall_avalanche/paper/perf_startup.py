"""How long a command takes before it does anything: --help, a refusal of bad input and
reading records, against importing torch and Avalanche (what every command paid before they
were imported only once something trains).

    python benchmarks/perf_startup.py                       # 5 runs each, median
    python benchmarks/perf_startup.py --records results/table1 --repeats 9

Each command runs in a fresh interpreter, one after another (run it on a quiet machine); the
last line is the ratio of the import of torch and Avalanche to ``table1.py --help``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pall_avalanche.cli import Parser
from pall_avalanche.exit_codes import main_guard


def _seconds(command: list[str], cwd: str, repeats: int) -> float:
    """Median wall time of ``command`` over ``repeats`` runs (any exit code)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(command, cwd=cwd, capture_output=True, check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None) -> None:
    parser = Parser(prog="perf_startup.py", description=__doc__.split("\n\n")[0],
                    epilog=__doc__.split("\n\n", 1)[1],
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5,
                        help="runs per command; the median is printed (default 5)")
    parser.add_argument("--records", type=Path,
                        help="a results folder to time python -m pall_avalanche.reports on "
                             "(default: not timed)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        raise ValueError(f"--repeats {args.repeats}: give an integer >= 1")
    if args.records is not None and not args.records.is_dir():
        raise ValueError(f"--records {args.records}: not a folder")
    python = sys.executable
    with tempfile.TemporaryDirectory() as scratch:
        commands = {
            "python -c pass (the interpreter)": [python, "-c", "pass"],
            "table1.py --help": [python, "-m", "pall_avalanche.paper.table1", "--help"],
            "table1.py --epochs 0 (refused, exit 2)": [
                python, "-m", "pall_avalanche.paper.table1", "--epochs", "0"],
            "import torch, avalanche": [python, "-c", "import torch, avalanche"],
        }
        if args.records is not None:
            commands["python -m pall_avalanche.reports RECORDS"] = [
                python, "-m", "pall_avalanche.reports", str(args.records.resolve()),
                "--out", str(Path(scratch) / "report")]
        timings = {name: _seconds(command, scratch, args.repeats)
                   for name, command in commands.items()}
    width = max(map(len, timings))
    print(f"{'command':<{width}}  median of {args.repeats} (s)")
    for name, seconds in timings.items():
        print(f"{name:<{width}}  {seconds:.2f}")
    ratio = timings["import torch, avalanche"] / timings["table1.py --help"]
    print(f"importing torch and Avalanche takes {ratio:.1f}x as long as table1.py --help")


def cli(argv=None) -> None:
    main_guard(main, argv, prog=Path(__file__).name)


if __name__ == "__main__":
    cli()
