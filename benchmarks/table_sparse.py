"""Table 2 of the paper: independent static / dynamic sparse subnetworks vs PALL.

Installed as the command ``pall-table-sparse`` (``--help`` lists the options);
the code is ``pall_avalanche.paper.table_sparse``.
"""

from pall_avalanche.paper.table_sparse import cli, main

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
