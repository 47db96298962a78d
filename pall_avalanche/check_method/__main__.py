"""``python -m pall_avalanche.check_method NAME``."""

from pall_avalanche.check_method import cli

if __name__ == "__main__":
    cli()
