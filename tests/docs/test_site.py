"""The documentation site builds in strict mode (a warning, a broken link, anchor, reference or
snippet fails it), with its four sections, and its generated references hold every command,
option, configuration key and registered method the code has now."""

from __future__ import annotations

import argparse
import logging
import os

import pytest
from blocks import DOCS, HOOK, ROOT

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
    return (site / path / "index.html").read_text()


def test_the_site_builds_in_strict_mode_with_its_four_sections(site):
    import yaml

    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text().replace("!!python", "#"))["nav"]
    sections = [next(iter(item)) for item in nav if isinstance(item, dict)]
    assert {"Tutorials", "How-to guides", "Reference", "Explanation"} <= set(sections)
    assert (site / "fidelity" / "index.html").is_file()        # docs/fidelity.md stays put
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
