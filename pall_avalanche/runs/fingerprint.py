"""The code a record's numbers depend on, as a fingerprint that is part of its identity.

A record is reused whenever its specification matches (:class:`~pall_avalanche.runs.RunSpec`),
so without the code in its identity a report could mix records of two code states (an
audit cell assembled from records written before a fix). :func:`code_fingerprint` hashes
the source of every module of this package that a run imports: the runner's
(:data:`ENGINE`), the method's strategy, model and benchmark modules and a probe's, with
everything they import from this package, transitively (:func:`module_closure`), read
from the source with :mod:`ast` (no module is imported, so it is cheap and torch-free).
Imports inside functions count too; an import of another package (torch, an extension's) does
not: the versions of those are kept in every record.
"""

from __future__ import annotations

import ast
import hashlib
from functools import cache
from pathlib import Path

__all__ = ["ENGINE", "code_fingerprint", "module_closure"]

#: The runner's modules: every record passes through them.
ENGINE = ("pall_avalanche.runs.engine",)
_PACKAGE = "pall_avalanche"
_ROOT = Path(__file__).resolve().parent.parent


def _source(module: str, root: Path) -> Path | None:
    """The source file of ``module`` (a dotted name under the package) in ``root`` (the
    package's folder), or None when there is none (a name imported from a module)."""
    parts = module.split(".")[1:]
    base = root.joinpath(*parts)
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _imports(path: Path, module: str, root: Path) -> set[str]:
    """The package's modules ``path`` imports: ``import a.b`` gives ``a.b``; ``from a import
    b`` gives ``a.b`` where that is a module, else ``a`` (a name defined or re-exported by
    ``a``); relative imports resolved. A package's ``__init__`` also gives its submodules
    named by string literals (the lazily loaded names of ``catalog.lazy_names``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                inner = f"{base}.{alias.name}"
                out.add(inner if _source(inner, root) is not None else base)
        elif (path.name == "__init__.py" and isinstance(node, ast.Constant)
              and isinstance(node.value, str) and node.value.isidentifier()
              and _source(f"{module}.{node.value}", root) is not None):
            out.add(f"{module}.{node.value}")
    return {name for name in out if name == _PACKAGE or name.startswith(_PACKAGE + ".")}


def module_closure(modules: tuple[str, ...], root: Path = _ROOT) -> dict[str, Path]:
    """Every package module reachable from ``modules`` by imports (:func:`_imports`), name →
    source file, with the ``__init__`` of every package on the way: it runs on import, but
    what it imports counts only where the package itself is imported from (a package that
    re-exports its modules does not drag them all into a run that imports one of them). A
    module outside this package is not followed."""
    found: dict[str, Path] = {}
    todo = [m for m in modules if m == _PACKAGE or m.startswith(_PACKAGE + ".")]
    followed: set[str] = set()
    while todo:
        name = todo.pop()
        if name in followed:
            continue
        path = _source(name, root)
        if path is None:
            continue
        followed.add(name)
        found[name] = path
        todo += _imports(path, name, root)
        for i in range(1, name.count(".") + 1):
            parent = ".".join(name.split(".")[:i])
            found.setdefault(parent, _source(parent, root))
    return found


@cache
def code_fingerprint(modules: tuple[str, ...], root: Path = _ROOT) -> str:
    """A short hash of the source of :func:`module_closure` of the runner and ``modules``
    (the run's strategy, model and benchmark modules; one outside this package contributes
    nothing: its version is its own business).

    :param modules: dotted module names.
    """
    closure = module_closure((*ENGINE, *modules), root)
    digest = hashlib.sha1()
    for name in sorted(closure):
        digest.update(name.encode())
        digest.update(closure[name].read_bytes())
    return digest.hexdigest()[:10]
