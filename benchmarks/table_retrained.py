"""Table A2 of the paper: PALL's retrained parameters θ̄ per unlearning request.

Installed as the command ``pall-table-retrained`` (``--help`` lists the options);
the code is ``pall_avalanche.paper.table_retrained``.
"""

from pall_avalanche.paper.table_retrained import cli, main

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
