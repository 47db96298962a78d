"""Table A7 and Fig. A1 of the paper: time per learning epoch and per unlearning request.

Installed as the command ``pall-table-timing`` (``--help`` lists the options);
the code is ``pall_avalanche.paper.table_timing``.
"""

from pall_avalanche.paper.table_timing import cli, main

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
