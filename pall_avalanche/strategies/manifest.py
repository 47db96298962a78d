"""The built-in methods' manifest, ``pall_avalanche/catalog/methods.json``: every declaration
(:class:`~pall_avalanche.catalog.declaration.Method`) of the ``DECLARATIONS`` tuples of this
package's modules, as JSON, so that the catalog knows the built-in methods without importing
torch (:data:`~pall_avalanche.catalog.MANIFEST`). ``python -m
pall_avalanche.strategies.manifest`` writes it after a declaration changed; ``--check`` exits 1
if it is not current (the test suite checks it too).
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
from importlib.resources import files

from pall_avalanche.catalog import (
    ABLATION_METHODS,
    AUDIT_CONTROL,
    AUDIT_DENSE_LEAKS,
    AUDIT_LEAKS,
    AUDIT_PER_TASK_CONTROL,
    AUDIT_PER_TASK_LEAKS,
    FIELD_METHODS,
    MANIFEST,
    TABLE1_METHODS,
    Method,
)

__all__ = ["declarations", "main", "manifest_text"]

#: The manifest's order (and so ``--help``'s and the reports'): the paper's methods as Table 1
#: lists them, its ablations, the field's, the audit's instruments. Another declaration
#: follows the one before it in its module (PALL's variants follow PALL), or comes last.
_ORDER = (*TABLE1_METHODS, *ABLATION_METHODS, *FIELD_METHODS, AUDIT_CONTROL, *AUDIT_LEAKS,
          AUDIT_PER_TASK_CONTROL, *AUDIT_PER_TASK_LEAKS, *AUDIT_DENSE_LEAKS)


def declarations() -> list[Method]:
    """Every declaration of a ``DECLARATIONS`` tuple of a module of this package, in the manifest's
    order."""
    package = importlib.import_module("pall_avalanche.strategies")
    rank = {name: float(i) for i, name in enumerate(_ORDER)}
    ranked: list[tuple[float, Method]] = []
    for module in pkgutil.iter_modules(package.__path__):
        last = float(len(rank))
        for i, method in enumerate(getattr(importlib.import_module(
                f"{package.__name__}.{module.name}"), "DECLARATIONS", ())):
            last = rank.get(method.name, last + 1e-3 * (i + 1))
            ranked.append((last, method))
    return [method for _, method in sorted(ranked, key=lambda pair: pair[0])]


def manifest_text() -> str:
    """The manifest as it should be (JSON, one declaration per entry)."""
    return json.dumps({"methods": [m.to_json() for m in declarations()]}, indent=1,
                      ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write the manifest (or with ``--check`` compare it); the exit status."""
    parser = argparse.ArgumentParser(prog="python -m pall_avalanche.strategies.manifest",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if the manifest is not current; write nothing")
    args = parser.parse_args(argv)
    path = files("pall_avalanche.catalog") / MANIFEST
    text = manifest_text()
    if args.check:
        current = path.read_text(encoding="utf-8") == text
        if not current:
            print(f"{path} is not current: run python -m pall_avalanche.strategies.manifest",
                  file=sys.stderr)
        return 0 if current else 1
    with open(str(path), "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {path} ({len(declarations())} methods)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
