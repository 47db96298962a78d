"""``python -m pall_avalanche.reports``: :func:`pall_avalanche.reports.command.cli`."""

from pall_avalanche.reports.command import cli

if __name__ == "__main__":
    cli()
