"""Every command block of a tutorial or how-to guide is checked as its marker says
(tests/docs/blocks.py): each says how; the commands exist and parse, every run script's
configuration is built and checked for every method it would run; 'commands' blocks run on the
embedded digits at the smallest settings, 'parse' blocks too in the slow suite."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from blocks import (
    CHECKED_PAGES,
    CODE_LANGUAGES,
    DOCS,
    FAST,
    HOOK,
    KINDS,
    ROOT,
    SMALLEST,
    Block,
    blocks,
    commands,
    entry_point,
    on_the_embedded_default,
)

from pall_avalanche.exit_codes import EXIT_RUNS_LEFT_OUT

PAGE_IDS = [str(p.relative_to(DOCS)) for p in CHECKED_PAGES]


def _all_blocks() -> list[Block]:
    return [b for page in sorted(DOCS.rglob("*.md")) if "_hooks" not in page.parts
            for b in blocks(page)]


@pytest.mark.parametrize("page", CHECKED_PAGES, ids=PAGE_IDS)
def test_every_command_block_says_how_it_is_checked(page):
    for block in blocks(page):
        if block.language not in CODE_LANGUAGES:
            continue
        assert block.marker == "run", f"{block.where}: no '<!-- run: KIND -->' marker"
        assert block.kind in KINDS, f"{block.where}: unknown kind {block.kind!r}"
        if block.kind in ("no", "parse-only"):
            assert block.reason, f"{block.where}: '{block.kind}' needs '— REASON'"
        if block.kind == "e2e":
            test_file = ROOT / block.argument.split()[1]
            assert test_file.is_file(), f"{block.where}: {test_file} does not exist"
            source = test_file.read_text()
            assert "README.md" in source or page.name in source, (
                f"{block.where}: {test_file.name} does not read this page")
        if block.kind == "python":
            assert block.language == "python", f"{block.where}: not a Python block"


def _is_run_script(parser) -> bool:
    return {"overrides", "benchmark", "methods", "out"} <= {a.dest for a in parser._actions}


def check_before_training(argv: list[str], tmp: Path) -> None:
    """What the command checks before it trains: its arguments with its own parser, and for a
    run script the extensions, methods and the configuration of every method it would run."""
    entry, args = entry_point(argv)
    args = on_the_embedded_default(args, tmp, gpu=False)
    parser = HOOK.capture_parser(entry)
    try:
        parsed = parser.parse_args(args)
    except SystemExit as exit_:
        raise AssertionError(f"{shlex.join(argv)}: refused by its parser") from exit_
    if not _is_run_script(parser):
        return
    from pall_avalanche.cli import config_from_args, parse_methods
    from pall_avalanche.config import check_run_config
    from pall_avalanche.extensions import load_extensions

    load_extensions(parsed.extensions)
    methods = parse_methods(parsed.methods)
    config, seeds, _ = config_from_args(parsed)
    assert seeds
    for method in methods:
        check_run_config(config, method)


def run_command(argv: list[str], tmp: Path, *, fast: bool) -> None:
    """Run ``argv`` in-process as its installed command would, on the embedded default."""
    import torch

    entry, args = entry_point(argv)
    args = on_the_embedded_default(args, tmp, gpu=torch.cuda.is_available())
    module, _, function = entry.partition(":")
    if _is_run_script(HOOK.capture_parser(entry)) and fast:
        args = [*args, *FAST, *SMALLEST.get(module, [])]
    main = getattr(__import__(module, fromlist=[function]), function)
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    # exit 3: the report was written, naming runs that diverged at this tiny scale (one epoch:
    # LSF's unlearning in the field table); anything else is a failure
    assert exit_info.value.code in (0, None, EXIT_RUNS_LEFT_OUT), \
        f"{shlex.join(argv)}: exit {exit_info.value.code}"


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A folder like the repository root (benchmarks/ and examples/ linked) to run in."""
    for name in ("benchmarks", "examples"):
        (tmp_path / name).symlink_to(ROOT / name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _write_files(page: Path, folder: Path) -> None:
    for block in blocks(page):
        if block.marker == "file":
            (folder / block.argument).write_text(block.text)


def _check_outputs(page: Path, folder: Path) -> None:
    for block in blocks(page):
        if block.marker != "output":
            continue
        written = (folder / block.argument).read_text().splitlines()
        expected = block.text.splitlines()
        position = 0
        for line in expected:
            if line.strip() == "...":
                continue
            assert line in written[position:], f"{block.where}: {line!r} not in {block.argument}"
            position = written.index(line, position) + 1


def _commands_of(page: Path, kinds: set[str]) -> list[list[str]]:
    return [argv for block in blocks(page) if block.marker == "run" and block.kind in kinds
            for argv in commands(block)]


@pytest.mark.parametrize("page", CHECKED_PAGES, ids=PAGE_IDS)
def test_every_command_parses_and_its_configuration_is_valid(page, workdir):
    _write_files(page, workdir)
    for argv in _commands_of(page, {"commands", "parse", "parse-only"}):
        check_before_training(argv, workdir)


@pytest.mark.parametrize("page", [p for p in CHECKED_PAGES if _commands_of(p, {"commands"})],
                         ids=lambda p: str(p.relative_to(DOCS)))
def test_command_blocks_run(page, workdir):
    _write_files(page, workdir)
    for argv in _commands_of(page, {"commands"}):
        run_command(argv, workdir, fast=True)
    _check_outputs(page, workdir)


def test_python_blocks_run():
    for block in _all_blocks():
        if block.marker == "run" and block.kind == "python":
            exec(compile(block.text, str(block.page), "exec"), {})


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in CHECKED_PAGES if _commands_of(p, {"parse"})],
                         ids=lambda p: str(p.relative_to(DOCS)))
def test_parsed_blocks_run_on_the_embedded_default(page, workdir):
    _write_files(page, workdir)
    for argv in _commands_of(page, {"commands", "parse"}):
        run_command(argv, workdir, fast=True)


def test_cited_documentation_pages_exist():
    """Every ``docs/....md`` that code, tests, the sweep files or the root documents cite."""
    cited = set()
    files = [*(ROOT / "pall_avalanche").rglob("*.py"), *(ROOT / "tests").rglob("*.py"),
             *(ROOT / "benchmarks").rglob("*"), *ROOT.glob("*.md")]
    for path in files:
        if path.is_file() and path.suffix in (".py", ".yaml", ".md"):
            cited |= set(re.findall(r"docs/\w[\w./-]*?\.md", path.read_text()))
    assert cited
    missing = sorted(c for c in cited if not (ROOT / c).is_file())
    assert not missing, f"cited but missing: {missing}"


def test_the_readme_fits_on_a_screen_and_keeps_its_two_commands():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    for command in ("pip install -e . && python benchmarks/table1.py",
                    'pip install -e ".[dev]" && python -m pytest'):
        assert command in readme
    assert "python -m pytest" in (ROOT / ".ci" / "run").read_text()
    links = re.findall(r"\]\((docs/[^)#]+)", readme)
    assert links and all((ROOT / link).exists() for link in links), links
