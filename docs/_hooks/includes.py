"""MkDocs hook: pages that include another file read on GitHub as well as on the site.

A page includes a file, or a marked section of one, with a region that GitHub shows as a link
to what is included and the site replaces with the included text::

    <!-- include: README.md:avalanche -->
    The README's [PALL in an Avalanche script](../../README.md#pall-in-an-avalanche-script).
    <!-- end include -->

``<!-- include python: FILE:START:END -->`` puts the included lines in a ``python`` block.
The region becomes a ``pymdownx.snippets`` line (``--8<-- "FILE:section"``, paths from the
repository root as mkdocs.yml's ``base_path``), so the snippets extension includes the text
and a missing file or section fails the strict build.
"""

from __future__ import annotations

import re
from typing import Any

REGION = re.compile(r"^<!-- include(?: (?P<language>\w+))?: (?P<target>\S+) -->\n"
                    r".*?^<!-- end include -->$", re.M | re.S)


def expand_includes(markdown: str) -> str:
    """``markdown`` with every include region replaced by its snippet line (in a fenced block
    of the region's language, where it names one)."""
    def snippet(match: re.Match) -> str:
        line = f'--8<-- "{match["target"]}"'
        return f"```{match['language']}\n{line}\n```" if match["language"] else line

    return REGION.sub(snippet, markdown)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return expand_includes(markdown)
