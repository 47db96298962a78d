"""Table A5 of the paper, ER (Retraining): retraining from scratch on the buffers vs PALL.

Installed as the command ``pall-table-er-retrain`` (``--help`` lists the options);
the code is ``pall_avalanche.paper.table_er_retrain``.
"""

from pall_avalanche.paper.table_er_retrain import cli, main

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
