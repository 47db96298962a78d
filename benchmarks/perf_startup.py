"""How long a command takes before it does anything (--help, bad input, reading records).

Installed as the command ``pall-perf-startup`` (``--help`` lists the options);
the code is ``pall_avalanche.paper.perf_startup``.
"""

from pall_avalanche.paper.perf_startup import cli, main

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
