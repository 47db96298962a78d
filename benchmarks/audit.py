"""Exactness audit: every unlearned model against models that never saw the unlearned task.

Installed as the command ``pall-audit`` (``--help`` lists the options);
the code is ``pall_avalanche.paper.audit``.
"""

from pall_avalanche.paper.audit import cli, main

__all__ = ["cli", "main"]

if __name__ == "__main__":
    cli()
