"""Table A6 of the paper: a longer sequence with many unlearning requests.

Installed as the command ``pall-table-scalability`` (``--help`` lists the options);
the code is ``pall_avalanche.paper.table_scalability``.
"""

from pall_avalanche.paper.table_scalability import cli, main

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
