"""Table A4 of the paper: β ∈ {0, 0.5, 1} × buffer size for PALL, with ER and DER++.

Installed as the command ``pall-table-rehearsal`` (``--help`` lists the options);
the code is ``pall_avalanche.paper.table_rehearsal``.
"""

from pall_avalanche.paper.table_rehearsal import cli, main

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
