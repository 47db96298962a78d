"""Table A3 of the paper: how PALL's buffer samples are chosen.

Installed as the command ``pall-table-buffer-selection`` (``--help`` lists the options);
the code is ``pall_avalanche.paper.table_buffer_selection``.
"""

from pall_avalanche.paper.table_buffer_selection import cli, main

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
