"""Fig. 3 of the paper: A_l and F_u against the number of unlearning requests N_u.

Installed as the command ``pall-fig3`` (``--help`` lists the options);
the code is ``pall_avalanche.paper.fig3``.
"""

from pall_avalanche.paper.fig3 import cli, main

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
