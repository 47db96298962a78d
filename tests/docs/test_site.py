"""The documentation site builds in strict mode (a warning, a broken link, anchor, reference or
snippet fails it), with its four sections, and its generated references hold every command,
option, configuration key and registered method the code has now; its pages read on GitHub
(no raw include lines, formulas in GitHub's math syntax) and the built site opened from disk
(links to pages, not folders, and a search index that needs no server)."""

from __future__ import annotations

import argparse
import logging
import os
import re

import pytest
from blocks import DOCS, HOOK, INCLUDES, ROOT

mkdocs = pytest.importorskip("mkdocs", reason="the docs tools come with the dev extra")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    os.environ.setdefault("NO_MKDOCS_2_WARNING", "1")
    folder = tmp_path_factory.mktemp("site")
    config = load_config(str(ROOT / "mkdocs.yml"), site_dir=str(folder), strict=True)
    cwd = os.getcwd()
    os.chdir(ROOT)         # as `mkdocs build` runs: from the repository root
    try:
        build(config)      # raises mkdocs.exceptions.Abort on any warning in strict mode
    finally:
        os.chdir(cwd)
        logging.getLogger("mkdocs").handlers.clear()
    return folder


def _page(site, path: str) -> str:
    return (site / f"{path}.html").read_text()


def test_the_site_builds_in_strict_mode_with_its_four_sections(site):
    import yaml

    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text().replace("!!python", "#"))["nav"]
    sections = [next(iter(item)) for item in nav if isinstance(item, dict)]
    assert {"Tutorials", "How-to guides", "Reference", "Explanation"} <= set(sections)
    assert (site / "fidelity.html").is_file()                  # docs/fidelity.md stays put
    assert "Reproducibility" in _page(site, "reproducibility")  # REPRODUCIBILITY.md included
    markdown = [p for p in DOCS.rglob("*.md") if "_hooks" not in p.parts]
    nav_text = (ROOT / "mkdocs.yml").read_text()
    assert all(str(p.relative_to(DOCS)) in nav_text for p in markdown), "a page not in the nav"


def test_every_command_and_option_is_in_the_command_reference(site):
    page = _page(site, "reference/commands")
    for command, entry in HOOK.command_entry_points().items():
        assert f'id="{command}"' in page, command
        parser = HOOK.capture_parser(entry)
        for action in parser._actions:
            if action.help != argparse.SUPPRESS:
                for option in action.option_strings:
                    assert option in page, (command, option)


def test_every_configuration_key_and_method_is_in_the_generated_references(site):
    from pall_avalanche.catalog import BENCHMARK_INFO, METHOD_INFO, MODEL_INFO
    from pall_avalanche.config import CONFIG_KEYS

    keys = _page(site, "reference/configuration")
    assert all(f"<code>{key}</code>" in keys for key in CONFIG_KEYS)
    catalog = _page(site, "reference/methods")
    for name in (*METHOD_INFO, *BENCHMARK_INFO, *MODEL_INFO):
        assert f"<code>{name}</code>" in catalog, name


def test_generated_parts_are_not_committed():
    """The references are generated when the site is built: the pages hold markers only."""
    for page in DOCS.rglob("*.md"):
        text = page.read_text()
        assert "| `--plugin MODULE_OR_FILE` |" not in text, page
        assert "| `n_retrain_iters` | int |" not in text, page


def _pages():
    return [p for p in DOCS.rglob("*.md") if "_hooks" not in p.parts]


def test_no_page_shows_a_raw_include_line_on_github():
    """GitHub renders Markdown without the snippets extension: an include is a region that
    shows a link there, and that link leads to the file the site includes."""
    for page in _pages():
        text = page.read_text()
        raw = [line for line in text.splitlines() if line.lstrip().startswith("--8<--")]
        assert not raw, (page, raw)
        for region in INCLUDES.REGION.finditer(text):
            target = region["target"].split(":")[0]
            links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", region[0])
            assert any((page.parent / link).resolve() == (ROOT / target).resolve()
                       for link in links), (page, region["target"], links)


def test_included_text_reaches_the_site(site):
    """The site shows what the regions include, not their GitHub links."""
    from blocks import expand_snippets

    readme_block = expand_snippets('--8<-- "README.md:avalanche"')
    assert "unlearning_metrics(benchmark.test_stream)" in readme_block
    assert "unlearning_metrics" in _page(site, "tutorials/avalanche")
    assert "register_method" in _page(site, "tutorials/own-method")
    assert "ozdenizci2025pall" in _page(site, "index")
    reproducibility = (ROOT / "REPRODUCIBILITY.md").read_text().splitlines()[0].lstrip("# ")
    assert reproducibility in _page(site, "reproducibility")
    for page in ("tutorials/avalanche", "tutorials/own-method", "index", "reproducibility"):
        assert "end include" not in _page(site, page)


def test_the_built_site_reads_from_disk(site):
    """Every link between pages names an HTML file (a browser shows a folder's listing for a
    link to a folder), and the search index is a script, loaded without a server."""
    for html in site.rglob("*.html"):
        if html.name == "404.html":         # served by a web server only, with absolute links
            continue
        for link in re.findall(r'href="([^"#]*)(?:#[^"]*)?"', html.read_text()):
            if link and not re.match(r"[a-z]+:", link):
                assert not link.endswith("/"), (html, link)
                assert (html.parent / link).exists(), (html, link)
    assert (site / "search" / "search_index.js").is_file()


def test_formulas_are_typeset(site):
    """The metrics' formulas are $...$ math (GitHub typesets it) and reach the site as
    arithmatex spans that MathJax typesets; none of a table's cells holds an unpaired $."""
    source = (DOCS / "reference" / "metrics.md").read_text()
    for line in source.splitlines():
        assert line.count("$") % 2 == 0, line
        assert not re.search(r"\$[^$]*\\\|[^$]*\$", line), line     # no escaped pipes in math
    page = _page(site, "reference/metrics")
    formulas = re.findall(r'<span class="arithmatex">(.*?)</span>', page)
    assert len(formulas) >= source.count("$") // 2 - 1
    assert any("\\frac{1}{T-1}" in f for f in formulas)
