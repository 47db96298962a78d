"""The fenced blocks of the documentation and how each is checked.

A block is checked as the marker comment on the line before it says:

- ``<!-- run: commands -->``: every command runs, in-process, in a temporary folder, on the
  embedded digits benchmark at the smallest settings the end-to-end tests use;
- ``<!-- run: parse -->``: every command is parsed by its own parser and, for a run script, its
  configuration built and checked for every method as the command does before it trains
  (default suite); the slow suite runs it like ``commands``;
- ``<!-- run: parse-only — REASON -->``: parsed and checked, never run (the reason says why);
- ``<!-- run: python -->``: executed;
- ``<!-- run: e2e FILE -->``: the test file FILE runs it (it must name the page it reads);
- ``<!-- run: no — REASON -->``: not run (another tool's command: the reason says which);
- ``<!-- file: NAME -->``: the block's text is written to NAME before the page's commands run;
- ``<!-- output: NAME -->``: the file NAME that the page's commands wrote holds these lines
  (a line ``...`` skips lines).

Include regions (docs/_hooks/includes.py) and snippet lines (``--8<-- "FILE:section"``) are
expanded as the site expands them, so a block included from the README is checked on the page
that shows it.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
#: The pages whose every command block must say how it is checked.
CHECKED_PAGES = sorted([*(DOCS / "tutorials").glob("*.md"), *(DOCS / "how-to").glob("*.md")])
CODE_LANGUAGES = {"bash", "sh", "shell", "console", "python"}
KINDS = {"commands", "parse", "parse-only", "python", "e2e", "no"}
#: The smallest settings of the end-to-end tests (tests/e2e/test_table1_cli.py): one epoch
#: on 40 samples per task, one seed (at this scale a method may diverge on another seed, and
#: refuse to write its record), in this process (worker processes would each import torch
#: again; the records are the same).
FAST = ["--set", "epochs=1", "--set", "train_per_task=40", "--seeds", "0", "--quiet",
        "--jobs", "1"]

#: A command's own smallest settings, after FAST: the audit needs two seeds for its intervals,
#: four shadow runs per method and role, and enough permutations for its family of tests.
SMALLEST = {"pall_avalanche.paper.audit": ["--seeds", "0", "1", "--shadows", "4",
                                           "--permutations", "400"]}

_SNIPPET = re.compile(r'^--8<-- "([^"]+)"$', re.M)
_SECTION = re.compile(r"--8<-- \[(start|end):([a-z][-_0-9a-z]*)\]")
_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```$", re.M | re.S)
_MARKER = re.compile(r"<!-- (run|file|output): (.+?) -->\s*\n$")


def _hook(name: str):
    """The site's hook docs/_hooks/NAME.py as a module."""
    spec = importlib.util.spec_from_file_location(f"docs_{name}_hook",
                                                  DOCS / "_hooks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: The reference hook (its entry points and parsers) and the include hook.
HOOK = _hook("reference")
INCLUDES = _hook("includes")


def expand_snippets(text: str) -> str:
    """``text`` with every include region and ``--8<-- "FILE[:section | :start:end]"`` line
    replaced by what it includes (paths from the repository root, as mkdocs.yml's
    ``base_path``)."""
    def include(match: re.Match) -> str:
        target = match[1]
        parts = target.split(":")
        lines = (ROOT / parts[0]).read_text().splitlines()
        if len(parts) == 2:
            start = next(i for i, line in enumerate(lines)
                         if _SECTION.search(line) and f"start:{parts[1]}]" in line)
            end = next(i for i, line in enumerate(lines)
                       if _SECTION.search(line) and f"end:{parts[1]}]" in line)
            lines = lines[start + 1:end]
        elif len(parts) == 3:
            lines = lines[int(parts[1]) - 1:int(parts[2])]
        return expand_snippets("\n".join(line for line in lines if not _SECTION.search(line)))

    return _SNIPPET.sub(include, INCLUDES.expand_includes(text))


@dataclass(frozen=True)
class Block:
    """A fenced block: its page, language, marker (kind and argument) and text."""

    page: Path
    line: int
    language: str
    marker: str
    argument: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}, block at line {self.line} of the expanded page"

    @property
    def kind(self) -> str:
        return self.argument.split()[0].rstrip(" —") if self.marker == "run" else self.marker

    @property
    def reason(self) -> str:
        return self.argument.partition("—")[2].strip()


def blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page`` (snippets expanded), with the marker before it."""
    text = expand_snippets(page.read_text())
    out = []
    for match in _FENCE.finditer(text):
        before = text[:match.start()]
        marker = _MARKER.search(before[-400:])
        kind, argument = (marker[1], marker[2].strip()) if marker else ("", "")
        out.append(Block(page, before.count("\n") + 1, match[1], kind, argument, match[2]))
    return out


def commands(block: Block) -> list[list[str]]:
    """The command lines of a shell block, each an argv: continuations joined, comments
    dropped, ``a && b`` split, environment assignments and the environment's own steps
    (``pip install``, the test suite, ``rm``) left out."""
    text = block.text.replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        for part in line.split("&&"):
            argv = shlex.split(part, comments=True)
            while argv and re.match(r"^[A-Z_]+=", argv[0]):
                argv = argv[1:]
            if not argv or argv[0] in ("pip", "rm", "pytest") or argv[1:3] == ["-m", "pytest"]:
                continue
            out.append(argv)
    return out


def entry_point(argv: list[str]) -> tuple[str, list[str]]:
    """(``module:function`` of the command, its arguments) for ``python benchmarks/X.py ...``,
    ``python -m MODULE ...`` or an installed ``pall-...`` command."""
    entries = HOOK.command_entry_points()
    if argv[0] in entries:
        return entries[argv[0]], argv[1:]
    if argv[0] == "python" and len(argv) > 1:
        if argv[1] == "-m":
            found = [e for e in entries.values() if e.partition(":")[0] == argv[2]]
            if found:
                return found[0], argv[3:]
        elif argv[1].startswith("benchmarks/") and argv[1].endswith(".py"):
            module = "pall_avalanche.paper." + Path(argv[1]).stem
            found = [e for e in entries.values() if e.partition(":")[0] == module]
            if found:
                return found[0], argv[2:]
    raise AssertionError(f"{shlex.join(argv)}: not a command of this package "
                         "(mark the block 'run: no — REASON' if it is another tool's)")


#: Options whose values were chosen for the benchmark a command names: dropped when it runs
#: on the embedded digits instead (option → number of values; -1: all until the next option).
_BENCHMARK_OPTIONS = {"--data-root": 1, "--task-counts": -1, "--n-unlearn-grid": -1,
                      "--buffer-sizes": -1}


#: Options that read a file a command may name by its path in the repository (a committed
#: report): the test runs in a folder of its own, so they get the checkout's file.
_COMMITTED_INPUTS = ("--audit-report", "--timing")


def on_the_embedded_default(args: list[str], tmp: Path, *, gpu: bool) -> list[str]:
    """``args`` as a test runs them: the benchmark digits, the CPU unless a GPU is there,
    ``--out`` and ``--report-dir`` under ``tmp`` (never the repository's ``reports/``), a
    committed report an option reads from the checkout."""
    out, i = [], 0
    swapped = False
    while i < len(args):
        arg = args[i]
        name, eq, value = arg.partition("=")
        if name == "--benchmark":
            value = value if eq else args[i + 1]
            swapped = value not in ("digits",) and value in ("cifar10", "cifar100",
                                                              "tinyimagenet")
            out += ["--benchmark", "digits" if swapped else value]
            i += 1 if eq else 2
            continue
        i += 1
        out.append(arg)
    args, out, i = out, [], 0
    while i < len(args):
        arg = args[i]
        if swapped and arg in _BENCHMARK_OPTIONS:
            i += 1
            while i < len(args) and not args[i].startswith("--"):
                i += 1
            continue
        if swapped and arg == "--set" and args[i + 1].startswith("n_tasks="):
            i += 2
            continue
        if arg == "--device" and not gpu:
            out += ["--device", "cpu"]
            i += 2
            continue
        if arg in ("--out", "--report-dir"):
            out += [arg, str(tmp / args[i + 1].lstrip("/~"))]
            i += 2
            continue
        if arg in _COMMITTED_INPUTS and (ROOT / args[i + 1]).is_file():
            out += [arg, str(ROOT / args[i + 1])]     # a committed report it reads
            i += 2
            continue
        out.append(arg)
        i += 1
    return out
