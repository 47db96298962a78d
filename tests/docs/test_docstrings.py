"""Docstring coverage of the public API: 100 % of the public names.

The public API is what ``pall_avalanche`` and every module the API reference renders (a
``::: module`` line of docs/reference/api/*.md) export: the names of its ``__all__`` (public
names defined in it when it has none). Each must have a docstring — a module attribute its
``#:`` comment (what the site shows) — and so must every public method and property an
exported class defines; a method that overrides one of a base class (an Avalanche hook,
``forward``) may inherit its base's. Every name a documented package exports is rendered on
some page."""

from __future__ import annotations

import importlib
import inspect
import re

import pytest
from blocks import DOCS, ROOT

griffe = pytest.importorskip("griffe", reason="the docs tools come with the dev extra")

API_PAGES = sorted((DOCS / "reference" / "api").glob("*.md"))
_DIRECTIVE = re.compile(r"^::: ([\w.]+)\n((?:    .*\n)*)", re.M)


def documented_modules(*, with_members: bool = False) -> list[str]:
    """Every module an API page renders, in page order (``with_members``: only those whose
    members are rendered too, not just their docstring)."""
    return [m for page in API_PAGES for m, options in _DIRECTIVE.findall(page.read_text() + "\n")
            if not (with_members and "members: false" in options)]


def exports(module) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n, v in vars(module).items() if not n.startswith("_")
                 and getattr(v, "__module__", None) == module.__name__]
    return list(names)


@pytest.fixture(scope="module")
def package():
    return griffe.load("pall_avalanche", search_paths=[str(ROOT)], resolve_aliases=False)


def _comment_docstring(package, module: str, name: str) -> bool:
    """A module attribute's docstring or ``#:`` comment, found statically where it is defined."""
    obj = package[module.removeprefix("pall_avalanche.")] if module != "pall_avalanche" else package
    member = obj.members.get(name)
    if member is None:      # a lazily loaded package: the name lives in one of its submodules
        member = next((m.members[name] for m in obj.modules.values() if name in m.members),
                      None)
    while member is not None and member.is_alias:
        target = member.target_path
        parent, _, attr = target.rpartition(".")
        try:
            member = package[parent.removeprefix("pall_avalanche.")].members.get(attr)
        except KeyError:
            return False
    if member is None:
        return False
    if member.docstring:
        return True
    try:
        lines = member.lines_collection[member.filepath]
    except KeyError:
        return False
    return bool(member.lineno) and lines[member.lineno - 2].strip().startswith("#:")


def _undocumented(package, module_name: str) -> list[str]:
    module = importlib.import_module(module_name)
    missing = []
    for name in exports(module):
        value = getattr(module, name)
        if inspect.isclass(value) or inspect.isroutine(value) or inspect.ismodule(value):
            if not inspect.getdoc(value):
                missing.append(f"{module_name}.{name}")
            if inspect.isclass(value):
                missing += [f"{module_name}.{name}.{member}"
                            for member in _undocumented_members(value)]
        elif not _comment_docstring(package, module_name, name):
            missing.append(f"{module_name}.{name}")
    return missing


def _undocumented_members(cls) -> list[str]:
    out = []
    for name, value in vars(cls).items():
        if name.startswith("_"):
            continue
        function = value.fget if isinstance(value, property) else getattr(value, "__func__",
                                                                           value)
        if not (inspect.isfunction(function)):
            continue
        inherited = any(name in vars(base) for base in cls.__mro__[1:])
        doc = inspect.getdoc(getattr(cls, name)) if inherited else function.__doc__
        if not doc:
            out.append(name)
    return out


def test_the_api_pages_render_modules_that_exist():
    modules = documented_modules()
    assert "pall_avalanche" in modules and "pall_avalanche.strategies" in modules
    for name in modules:
        importlib.import_module(name)


def test_every_public_name_has_a_docstring(package):
    missing = [name for module in dict.fromkeys(documented_modules())
               for name in _undocumented(package, module)]
    assert not missing, "public names without a docstring:\n" + "\n".join(missing)


def test_every_name_a_documented_package_exports_is_rendered():
    rendered = [(n, getattr(module, n)) for m in documented_modules(with_members=True)
                for module in [importlib.import_module(m)] for n in exports(module)]
    for name in documented_modules():
        module = importlib.import_module(name)
        for export in exports(module):
            if export.startswith("__"):      # __version__: documented, not an API object
                continue
            value = getattr(module, export)
            assert any(n == export and v is value for n, v in rendered), (
                f"{name}.{export} is exported but rendered on no API page")
