"""``python -m pall_avalanche.reports``: :func:`pall_avalanche.reports.command.cli`."""

from pall_avalanche.reports.command import cli

cli()
