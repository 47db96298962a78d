"""PALL on a model with BatchNorm running statistics: F_u with and without BatchNorm, the
statistics refreshed from the buffers or kept.

Installed as the command ``pall-running-statistics`` (``--help`` lists the options);
the code is ``pall_avalanche.paper.running_statistics``.
"""

from pall_avalanche.paper.running_statistics import cli, main

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
