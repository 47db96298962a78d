"""What a run costs besides the method: the default Table 1, an audit shadow run and a run's
phases, this code beside a baseline commit.

Installed as the command ``pall-perf-runs`` (``--help`` lists the options);
the code is ``pall_avalanche.paper.perf_runs``.
"""

from pall_avalanche.paper.perf_runs import cli, main

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
