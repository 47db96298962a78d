"""Table A8 of the paper: the worst seed's A_l (A_l^min) and the mean F_u^max, every method.

Installed as the command ``pall-table-worst-case`` (``--help`` lists the options);
the code is ``pall_avalanche.paper.table_worst_case``.
"""

from pall_avalanche.paper.table_worst_case import cli, main

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
