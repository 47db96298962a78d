"""What a training step and an unlearning step cost as tasks accumulate: aten operations and
CPU time per step of every method at T = 5, 10 and 20, against a plain step.

Installed as the command ``pall-perf-steps`` (``--help`` lists the options);
the code is ``pall_avalanche.paper.perf_steps``.
"""

from pall_avalanche.paper.perf_steps import cli, main

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
