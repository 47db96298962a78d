"""One prepared check of the GPU path (versions, masks, host synchronisations, kill and
resume, step costs, T = 20 unlearning, a two-worker Table 1).

Installed as the command ``pall-gpu-check`` (``--help`` lists the options);
the code is ``pall_avalanche.paper.gpu_check``.
"""

from pall_avalanche.paper.gpu_check import cli, main

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
