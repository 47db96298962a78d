"""What subnetwork masking costs: PALL vs Sequential training steps, side by side.

Installed as the command ``pall-perf-masking`` (``--help`` lists the options);
the code is ``pall_avalanche.paper.perf_masking``.
"""

from pall_avalanche.paper.perf_masking import cli, main

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
