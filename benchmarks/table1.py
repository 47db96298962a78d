"""Table 1 of the paper: every method on one benchmark, mean ± std over seeds.

Installed as the command ``pall-table1`` (``--help`` lists the options);
the code is ``pall_avalanche.paper.table1``.
"""

from pall_avalanche.paper.table1 import cli, main

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
