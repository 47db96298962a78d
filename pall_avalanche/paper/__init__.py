"""The paper's tables and figures, one module per script (``python benchmarks/<name>.py`` or
the installed command ``pall-<name>``): each parses and checks its flags without torch, runs
its grid of records (:mod:`pall_avalanche.paper.kit`) and writes its report;
:mod:`~pall_avalanche.paper.masking_cost` is the measurement behind ``perf_masking``."""
