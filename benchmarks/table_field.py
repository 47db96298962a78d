"""The continual-unlearning field in one table: the paper's methods and CLPU-DER++, the
Amnesiac baselines, HAT, Amnesiac HAT and UnCLe, with the field's metrics.

Installed as the command ``pall-table-field`` (``--help`` lists the options);
the code is ``pall_avalanche.paper.table_field``.
"""

from pall_avalanche.paper.table_field import cli, main

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
