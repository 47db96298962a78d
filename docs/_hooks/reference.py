"""MkDocs hook: the generated parts of the reference, rendered from the code at build time.

A page asks for a generated part with a marker line of its own (nothing of it is committed):

- ``<!-- pall:commands -->``: every command of ``[project.scripts]`` in pyproject.toml, its
  options read from the argument parser the command builds (a new command appears by being
  installed as one);
- ``<!-- pall:config-keys -->``: every key of ``pall_avalanche.config.CONFIG_KEYS`` with its
  type, valid values, meaning and flag, and its value in every shipped configuration file;
- ``<!-- pall:catalog -->``: every registered method (label, exact, Table 1 size, keys, groups),
  benchmark and model of ``pall_avalanche.catalog``, with the methods' own keys and variants.

Nothing here imports torch: parsers are captured when the command calls ``parse_args`` (the
commands import torch only once something trains), so the strict build takes seconds.
"""

from __future__ import annotations

import argparse
import html
import importlib
import re
import sys
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:       # document this checkout's code, not another installed copy
    sys.path.insert(0, str(ROOT))

MARKER = re.compile(r"^<!-- pall:([a-z-]+) -->$", re.M)


class _Captured(BaseException):
    """Raised from ``parse_args`` to hand the command's parser out of its ``main``."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__()
        self.parser = parser


def command_entry_points(root: Path = ROOT) -> dict[str, str]:
    """``[project.scripts]`` of pyproject.toml: command → ``module:function``."""
    with open(root / "pyproject.toml", "rb") as f:
        return dict(tomllib.load(f)["project"]["scripts"])


def capture_parser(entry: str) -> argparse.ArgumentParser:
    """The parser the command ``entry`` (``module:function``) builds, captured at its
    ``parse_args`` before the command does anything else."""
    module, _, function = entry.partition(":")
    main = getattr(importlib.import_module(module), function)
    original = argparse.ArgumentParser.parse_args
    formatwarning = warnings.formatwarning

    def capture(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        raise _Captured(self)

    argparse.ArgumentParser.parse_args = capture
    try:
        main([])
    except _Captured as captured:
        return captured.parser
    finally:
        argparse.ArgumentParser.parse_args = original
        warnings.formatwarning = formatwarning   # the commands' main_guard sets its own
    raise RuntimeError(f"{entry} returned without parsing its arguments")


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _code(text: Any) -> str:
    return f"`{text}`"


def _options(action: argparse.Action) -> str:
    if not action.option_strings:
        return _code(action.metavar or action.dest)
    names = ", ".join(action.option_strings)
    if action.nargs == 0:
        return _code(names)
    metavar = action.metavar or (action.dest.upper() if not action.choices else
                                 "{" + ",".join(map(str, action.choices)) + "}")
    if action.nargs in ("+", "*"):
        metavar = f"{metavar} [{metavar} ...]"
    return _code(f"{names} {metavar}")


def _text(text: str) -> str:
    """Plain help text as Markdown: ``<name>`` shown, not taken for HTML; ````x```` as code."""
    return re.sub(r"``(.+?)``", r"`\1`", html.escape(text, quote=False))


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if not action.help:
        return ""
    return _text(parser._get_formatter()._expand_help(action))   # %(default)s as --help shows


def _default(action: argparse.Action) -> str:
    if action.nargs == 0 or action.default in (None, argparse.SUPPRESS, [], False):
        return ""
    return _code(action.default)


def _visible(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions
            if a.help != argparse.SUPPRESS and not isinstance(a, argparse._HelpAction)]


def _option_table(parser: argparse.ArgumentParser, actions: Iterable[argparse.Action]) -> str:
    rows = ["| option | default | what it does |", "|---|---|---|"]
    rows += [f"| {_options(a)} | {_cell(_default(a))} | {_cell(_help(parser, a))} |"
             for a in actions]
    return "\n".join(rows)


def _key(action: argparse.Action) -> tuple:
    return (action.dest, tuple(action.option_strings))


def run_options_parser() -> argparse.ArgumentParser:
    """A parser with the options every run script shares (``cli.add_run_arguments``)."""
    from pall_avalanche.cli import Parser, add_run_arguments

    parser = Parser(prog="SCRIPT")
    add_run_arguments(parser, default_out="results/<name>")
    return parser


def commands_markdown(root: Path = ROOT) -> str:
    """Every installed command, its usage, description and options (run scripts: the shared
    run options once, then each script's own options and defaults)."""
    common = run_options_parser()
    shared = {_key(a): a for a in _visible(common)}
    sections, toc = [], []
    for command, entry in command_entry_points(root).items():
        parser = capture_parser(entry)
        module = entry.partition(":")[0]
        actions = _visible(parser)
        is_run_script = shared.keys() <= {_key(a) for a in actions}
        spellings = [f"`{command}`"]
        stem = module.rsplit(".", 1)[-1]
        if module.startswith("pall_avalanche.paper.") and (root / "benchmarks" /
                                                            f"{stem}.py").is_file():
            spellings.append(f"`python benchmarks/{stem}.py`")
        elif module.count(".") == 1 or module.endswith(".command"):
            spellings.append(f"`python -m {module.removesuffix('.command')}`")
        raw_description = (parser.description or "").strip()
        description = _text(raw_description)
        toc.append(f"| [`{command}`](#{command}) | {_cell(description)} |")
        lines = [f"## {command}", "", f"Run as {' or '.join(spellings)}; the code is "
                 f"`{entry}`.", ""]
        if description:
            lines += [description, ""]
        own = [a for a in actions if _key(a) not in shared]
        if is_run_script:
            changed = [f"`{a.option_strings[-1]} {a.default}`" for a in actions
                       if _key(a) in shared and a.default != shared[_key(a)].default]
            lines += ["Takes the [run options](#run-options)"
                      + (f", with the defaults {', '.join(changed)}" if changed else "")
                      + (", and these options of its own:" if own else "."), ""]
        else:
            lines += ["```text", parser.format_usage().strip(), "```", ""]
        if own:
            lines += [_option_table(parser, own), ""]
        epilog = (parser.epilog or "").strip()
        if epilog and epilog != raw_description:
            lines += ['??? note "More from `--help`"', "", "    ```text"]
            lines += [f"    {line}".rstrip() for line in epilog.splitlines()]
            lines += ["    ```", ""]
        sections.append("\n".join(lines))
    run_options = ["## Run options", "",
                   "Every run script (a table, figure or audit script) takes these options "
                   "(`pall_avalanche.cli.add_run_arguments`); `--out` defaults to "
                   "`results/<name>`, the script's name.", "",
                   _option_table(common, _visible(common)), ""]
    return "\n".join(["| command | what it does |", "|---|---|", *toc, "",
                      "\n".join(run_options), *sections])


def _type_name(spec: Any) -> str:
    name = spec.kind.__name__
    return f"{name} or null" if spec.nullable else name


def _value(value: Any) -> str:
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, list) and len(value) > 6:
        return f"`[{value[0]}, ..., {value[-1]}]` ({len(value)})"
    if isinstance(value, dict):
        return "; ".join(f"{_code(k)}: {_value(v)}" for k, v in value.items()) or "`{}`"
    return _code(value)


def config_keys_markdown() -> str:
    """The run keys (type, valid values, meaning, flag), the keys the methods declare (with
    their defaults), then what every shipped configuration sets (``for_benchmark``: what
    ``--benchmark NAME`` starts from)."""
    from pall_avalanche.catalog import METHOD_INFO
    from pall_avalanche.cli import flag_keys
    from pall_avalanche.config import CONFIG_DIR, CONFIG_KEYS, REQUIRED_KEYS, for_benchmark

    flags = {key: flag for flag, key in flag_keys().items()}

    def flag(key: str) -> str:
        return f"`--{flags[key].replace('_', '-')}`" if key in flags else ""

    rows = ["| key | type | valid values | meaning | flag |", "|---|---|---|---|---|"]
    for key, spec in CONFIG_KEYS.items():
        name = f"`{key}`" + (" (required)" if key in REQUIRED_KEYS else "")
        rows.append(f"| {name} | {_type_name(spec)} | {_cell(spec.what) or 'any'} | "
                    f"{_cell(spec.meaning)} | {flag(key)} |")
    declared: dict[tuple, list[str]] = {}
    for method, info in METHOD_INFO.items():
        for key, spec in info.keys.items():
            declared.setdefault((key, spec), []).append(method)
    keys = ["| key | methods | type | valid values | default | meaning | flag |",
            "|---|---|---|---|---|---|---|"]
    for (key, spec), methods in sorted(declared.items(), key=lambda item: item[0][0]):
        keys.append(f"| `{key}` | {', '.join(f'`{m}`' for m in methods)} | "
                    f"{_type_name(spec)} | {_cell(spec.bounds) or 'any'} | "
                    f"{_value(spec.default)} | {_cell(spec.meaning)} | {flag(key)} |")
    names = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))
    configs = {name: for_benchmark(name) for name in names}
    set_keys = [*CONFIG_KEYS, *sorted({k for c in configs.values() for k in c
                                        if k not in CONFIG_KEYS})]
    values = ["| key | " + " | ".join(f"`{n}`" for n in names) + " |",
              "|---|" + "---|" * len(names)]
    for key in set_keys:
        if key == "methods":
            continue
        cells = [_value(c[key]) if key in c else "—" for c in configs.values()]
        values.append(f"| `{key}` | " + " | ".join(_cell(c) for c in cells) + " |")
    methods = sorted({m for c in configs.values() for m in c.get("methods", {})})
    per_method = ["| method | " + " | ".join(f"`{n}`" for n in names) + " |",
                  "|---|" + "---|" * len(names)]
    for method in methods:
        cells = [_value(c.get("methods", {}).get(method)) if method in c.get("methods", {})
                 else "—" for c in configs.values()]
        per_method.append(f"| `{method}` | " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join([
        "## Run keys", "", *rows, "",
        "## Method keys", "",
        "Each method declares its keys next to its strategy class; a configuration's "
        "`KEY: VALUE` sets the key for every method that declares it, "
        "`methods.METHOD.KEY` for one. A variant's settings (below, *Registered methods*) "
        "win over the first.", "", *keys, "",
        "## Values in the shipped configurations", "",
        "What `--benchmark NAME` starts from (`pall_avalanche/configs/NAME.yaml`, with the "
        "keys it leaves out from `digits.yaml`; — : not set, so a method key is at its "
        "default). A shipped file sets a method key only where the benchmark's value differs "
        "from the default, with the reason beside it.", "", *values, "",
        "### Per-method entries (`methods:`)", "",
        "These override the other values for one method (`--set methods.METHOD.KEY=VALUE`).",
        "", *per_method, ""])


def catalog_markdown() -> str:
    """The registered methods, benchmarks and models (``pall_avalanche.catalog``)."""
    from pall_avalanche.catalog import BENCHMARK_INFO, METHOD_INFO, MODEL_INFO
    from pall_avalanche.cli import METHOD_GROUPS

    groups = {m: [g for g, members in METHOD_GROUPS.items() if m in members]
              for m in METHOD_INFO}
    methods = ["| name | label | exact | Table 1 size | keys it takes | settings | groups | "
               "code |", "|---|---|---|---|---|---|---|---|"]
    for name, info in METHOD_INFO.items():
        keys = ", ".join(f"`{k}`" for k in info.keys)
        settings = "; ".join(f"`{k}`: {_value(v)}" for k, v in info.settings.items())
        methods.append(f"| `{name}` | {_cell(info.label)} | {'yes' if info.exact else 'no'} | "
                       f"{_cell(info.size)} | {keys} | {_cell(settings)} | "
                       f"{', '.join(f'`{g}`' for g in groups[name])} | `{info.where}` |")
    benchmarks = ["| name | classes | default T | valid T | code |", "|---|---|---|---|---|"]
    benchmarks += [f"| `{n}` | {b.n_classes} | {b.default_n_tasks} | "
                   f"{', '.join(map(str, b.valid_n_tasks()))} | `{b.where}` |"
                   for n, b in BENCHMARK_INFO.items()]
    models = ["| name | code |", "|---|---|"]
    models += [f"| `{n}` | `{m.where}` |" for n, m in MODEL_INFO.items()]
    return "\n".join([
        "### Registered methods", "",
        "`--methods` takes these names and the groups `"
        + "`, `".join(METHOD_GROUPS) + "`. A variant's settings win over a configuration's "
        "values for every method; `methods.METHOD.KEY` changes them.", "", *methods, "",
        "### Registered benchmarks", "", *benchmarks, "",
        "### Registered models", "", *models, ""])


def committed_reports(root: Path = ROOT) -> list[tuple[str, str, str]]:
    """(report, title, command) of every committed Markdown report in ``reports/`` and its
    folders (``reports/field/``), the command read from the report's own ``Command:`` line."""
    out = []
    for path in sorted((root / "reports").rglob("*.md")):
        text = path.read_text()
        command = re.search(r"^Command: `(.+?)`", text, re.M)
        title = text.splitlines()[0].lstrip("# ").strip() if text else path.stem
        out.append((path.relative_to(root / "reports").as_posix(), title,
                    command[1] if command else ""))
    return out


def committed_reports_markdown() -> str:
    """A table of the committed reports and the command each was written by."""
    rows = ["| report | what | command |", "|---|---|---|"]
    rows += [f"| `reports/{name}` | {_cell(title)} | `{_cell(command)}` |"
             for name, title, command in committed_reports()]
    return "\n".join(rows)


GENERATORS: dict[str, Callable[[], str]] = {
    "committed-reports": committed_reports_markdown,
    "commands": commands_markdown,
    "config-keys": config_keys_markdown,
    "catalog": catalog_markdown,
}


def render(markdown: str) -> str:
    """``markdown`` with every marker replaced by its generated part."""
    def replace(match: re.Match) -> str:
        if match[1] not in GENERATORS:
            raise ValueError(f"unknown generated part {match[1]!r}; known: "
                             f"{', '.join(GENERATORS)}")
        return GENERATORS[match[1]]()

    return MARKER.sub(replace, markdown)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """MkDocs event: replace the markers of a page."""
    return render(markdown)
