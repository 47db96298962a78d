"""The code a record's numbers depend on, as a fingerprint that is part of its identity.

A record is reused whenever its specification matches (:class:`~pall_avalanche.runs.RunSpec`),
so without the code in its identity a report could mix records of two code states (an
audit cell assembled from records written before a fix). :func:`code_fingerprint` hashes
the code of every module of this package that a run imports: the runner's
(:data:`ENGINE`), the method's strategy, model and benchmark modules and a probe's, with
everything they import from this package, transitively (:func:`module_closure`), read
from the source with :mod:`ast` (no module is imported, so it is cheap and torch-free).
Imports inside functions count too; an import of another package (torch, an extension's) does
not: the versions of those are kept in every record. The runner imports the strategies'
infrastructure (:mod:`~pall_avalanche.strategies.base`,
:mod:`~pall_avalanche.strategies.registry`), not every strategy, so a method's records change
with its own strategy's code only.

A module's code is its tokens (:mod:`tokenize`) without comments, docstrings, line breaks and
spacing (:func:`_code_tokens`): rewording a docstring or reformatting a line keeps every
identity, and the tokens are the same under every Python version this package supports (the
output of ``ast.dump`` is not).
"""

from __future__ import annotations

import ast
import hashlib
import io
import tokenize
from collections.abc import Iterator
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


@cache
def _imports(path: Path, module: str, root: Path) -> frozenset[str]:
    """The package's modules ``path`` imports: ``import a.b`` gives ``a.b``; ``from a import
    b`` gives ``a.b`` where that is a module, else ``a`` (a name defined or re-exported by
    ``a``); relative imports resolved. A package's ``__init__`` also gives its submodules
    named by string literals (the lazily loaded names of ``catalog.lazy_names``). Read once per
    process, as :func:`_code` (the code a process runs is what it imported when it started)."""
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
    return frozenset(name for name in out if name == _PACKAGE or name.startswith(_PACKAGE + "."))


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


def _docstrings(tree: ast.Module, lines: list[str]) -> dict[tuple[int, int], tuple[int, int]]:
    """Where every docstring (the string that is the first statement of the module, a class or
    a function) starts → where it ends, as :mod:`tokenize` counts (columns in characters; those
    of :mod:`ast` count the bytes of UTF-8)."""
    def position(line: int, byte: int) -> tuple[int, int]:
        return line, len(lines[line - 1].encode()[:byte].decode())

    spans = {}
    for node in ast.walk(tree):
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                and node.body and isinstance(node.body[0], ast.Expr)
                and isinstance(node.body[0].value, ast.Constant)
                and isinstance(node.body[0].value.value, str)):
            doc = node.body[0]
            spans[position(doc.lineno, doc.col_offset)] = position(doc.end_lineno,
                                                                   doc.end_col_offset)
    return spans


def _code_tokens(source: str) -> Iterator[tuple[str, str]]:
    """The tokens of ``source`` that are code, as (token name, text): comments, docstrings
    (with the line end after them) and line breaks inside brackets are dropped, a statement's
    end and an indentation change keep their kind only (not their text: how many spaces), and
    an f-string is one string token, its text as written, as Python 3.11 and before give it
    (3.12 tokenizes its parts)."""
    lines = io.StringIO(source).readlines()     # numbered as tokenize and ast number them
    docstrings = _docstrings(ast.parse(source), lines)
    fstring = getattr(tokenize, "FSTRING_START", None), getattr(tokenize, "FSTRING_END", None)
    until = None                # the end of the docstring being dropped, with its line end
    depth, start = 0, (0, 0)    # f-strings open (nested ones count), where the outer began
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in (tokenize.COMMENT, tokenize.NL):
            continue
        until = docstrings.get(token.start, until)
        if until is not None and token.start < until:      # in a docstring
            continue
        if until is not None:           # the token after a docstring: its line end goes too
            until = None
            if token.type == tokenize.NEWLINE:
                continue
        if depth or token.type == fstring[0]:
            start = start if depth else token.start
            depth += (token.type == fstring[0]) - (token.type == fstring[1])
            if not depth:
                text = "".join(lines[start[0] - 1:token.end[0]])
                end = len(text) - len(lines[token.end[0] - 1]) + token.end[1]
                yield "STRING", text[start[1]:end]
            continue
        yield tokenize.tok_name[token.type], (
            "" if token.type in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)
            else token.string)


@cache
def _code(path: Path) -> str:
    """The hash of the code of the module in ``path`` (:func:`_code_tokens`), read once per
    process: every run the process plans shares the modules of the runner."""
    digest = hashlib.sha1()
    for kind, text in _code_tokens(path.read_text(encoding="utf-8")):
        digest.update(f"{kind} {len(text)} {text}\n".encode())
    return digest.hexdigest()


@cache
def code_fingerprint(modules: tuple[str, ...], root: Path = _ROOT) -> str:
    """A short hash of the code (:func:`_code_tokens`) of :func:`module_closure` of the runner
    and ``modules`` (the run's strategy, model and benchmark modules; one outside this package
    contributes nothing: its version is its own business).

    :param modules: dotted module names.
    """
    closure = module_closure((*ENGINE, *modules), root)
    digest = hashlib.sha1()
    for name in sorted(closure):
        digest.update(f"{name} {_code(closure[name])}\n".encode())
    return digest.hexdigest()[:10]
