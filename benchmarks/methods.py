"""Every registered method with what it costs (exactness, model size, seconds per learning
epoch and per unlearning request from the committed timing report).

Installed as the command ``pall-methods`` (``--help`` lists the options);
the code is ``pall_avalanche.paper.methods``.
"""

from pall_avalanche.paper.methods import cli, main

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
