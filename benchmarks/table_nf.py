"""Table A1 of the paper: PALL with N_f ∈ {0, 10, 25, 50, 100} retraining iterations.

Installed as the command ``pall-table-nf`` (``--help`` lists the options);
the code is ``pall_avalanche.paper.table_nf``.
"""

from pall_avalanche.paper.table_nf import cli, main

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
