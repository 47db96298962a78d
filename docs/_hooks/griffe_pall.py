"""A griffe extension for this project's docstrings (loaded by mkdocstrings, see mkdocs.yml).

- ``#:`` comments above a module or class attribute are its docstring, as Sphinx reads them
  (``CONFIG_KEYS``, ``TABLE1_METHODS``, ...);
- Sphinx roles (``:func:`~pall_avalanche.config.for_benchmark```) become links to the
  documented object, or plain code where the object has no page (optional cross-references:
  a role never breaks the strict build);
- Sphinx literals (````code````) become Markdown code.
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

__all__ = ["PallDocstrings", "sphinx_to_markdown"]

_ROLE = re.compile(r":(?:py:)?(?:func|class|mod|data|meth|attr|exc|obj|const):`(~?)([^`<]+?)`")
_LITERAL = re.compile(r"``(.+?)``", re.S)


def sphinx_to_markdown(text: str, module: str = "") -> str:
    """``text`` with Sphinx roles turned into optional autorefs and ````x```` into ```x```.

    :param text: a docstring.
    :param module: the dotted path of the module the docstring belongs to: a bare name in a
        role (``:func:`plan```) is looked up there.
    """
    def role(match: re.Match) -> str:
        short, target = match[1] == "~", match[2].strip().rstrip("()")
        title = target.rsplit(".", 1)[-1] if short else target
        identifier = target if "." in target or not module else f"{module}.{target}"
        return (f'<autoref identifier="{html.escape(identifier)}" optional>'
                f"<code>{html.escape(title)}</code></autoref>")

    return _LITERAL.sub(r"`\1`", _ROLE.sub(role, text))


class PallDocstrings(griffe.Extension):
    """Sphinx comments as attribute docstrings; Sphinx markup as Markdown."""

    def on_attribute_instance(self, *, attr: griffe.Attribute, **kwargs: Any) -> None:
        if attr.docstring is not None or not attr.lineno:
            return
        try:
            lines = attr.lines_collection[attr.filepath]
        except (KeyError, AttributeError, TypeError):
            return
        comment = []
        index = attr.lineno - 2
        while index >= 0 and lines[index].strip().startswith("#:"):
            comment.insert(0, lines[index].strip()[2:].strip())
            index -= 1
        if comment:
            attr.docstring = griffe.Docstring("\n".join(comment), lineno=index + 2,
                                              parent=attr)

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        for obj in _walk(pkg):
            if obj.docstring is not None:
                module = obj.module.path if not obj.is_module else obj.path
                obj.docstring.value = sphinx_to_markdown(obj.docstring.value, module)


def _walk(obj: griffe.Object):
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _walk(member)
