"""The paper's tables and figures, one module per script (``python benchmarks/<name>.py`` or
the installed command ``pall-<name>``): each parses its flags, runs its grid of records
(:mod:`pall_avalanche.experiments`) and writes its report."""
