"""pall_avalanche: lifelong learning with exact task unlearning (PALL, ICLR 2025) and its
baselines as Avalanche strategies.

Bring your own method, benchmark or model: register it once (this import is light: no torch)
and every script, sweep and the exactness audit run it by name::

    from pall_avalanche import Key, Method, register_method
    register_method(Method("mine", "my_package.strategy:Mine", exact=False,
                           keys={"l2_strength": Key(0.1, "weight of the L2 pull", low=0)}))

A file of such calls is loaded with ``--plugin FILE`` (or an installed package's
``pall_avalanche.extensions`` entry point): see :mod:`pall_avalanche.extensions`.
"""

from pall_avalanche.catalog import Key, Method, register_benchmark, register_method, register_model

__all__ = ["Key", "Method", "__version__", "register_benchmark", "register_method",
           "register_model"]

#: The package's version, in one place (pyproject.toml reads it; CHANGELOG.md names it).
__version__ = "0.1.0"
