"""One declaration per method: the manifest is the strategy modules' declarations, the
constructors agree with them, the shipped configurations hold overrides only (each with its
reason), and every resolved configuration is the declared default unless an override says
otherwise."""

from __future__ import annotations

import inspect
import re
from importlib.resources import files

import pytest
import yaml

from pall_avalanche.catalog import MANIFEST, METHOD_INFO, Key, Method, register_method
from pall_avalanche.cli import Parser, add_run_arguments, config_from_args, parse_run_arguments
from pall_avalanche.config import (
    CONFIG_DIR,
    CONFIG_KEYS,
    check_setting,
    for_benchmark,
    resolve_method_config,
)
from pall_avalanche.strategies import METHODS
from pall_avalanche.strategies.manifest import declarations, manifest_text

SHIPPED = sorted(CONFIG_DIR.glob("*.yaml"))


def test_the_manifest_is_the_strategy_modules_declarations():
    on_disk = (files("pall_avalanche.catalog") / MANIFEST).read_text(encoding="utf-8")
    assert on_disk == manifest_text(), ("the manifest is not current: run python -m "
                                        "pall_avalanche.strategies.manifest")
    built_in = {m.name: m for m in declarations()}
    for name, method in built_in.items():
        assert METHOD_INFO[name] == Method.from_json(method.to_json()), name
        assert METHOD_INFO[name].where == method.where == (
            f"{METHODS[name].strategy.__module__}:{METHODS[name].strategy.__qualname__}")


def constructor_defaults(strategy: type) -> dict:
    """Each keyword's default as the first constructor up the class hierarchy that names the
    keyword gives it (``inspect.Parameter.empty``: required there)."""
    defaults: dict = {}
    for cls in strategy.__mro__:
        init = cls.__dict__.get("__init__")
        if init is None:
            continue
        for name, p in inspect.signature(init).parameters.items():
            if p.kind is p.KEYWORD_ONLY or p.kind is p.POSITIONAL_OR_KEYWORD:
                defaults.setdefault(name, p.default)
    return defaults


@pytest.mark.parametrize("method", [m.name for m in declarations()])
def test_a_constructor_s_defaults_are_its_declaration_s(method):
    """A strategy built directly (an Avalanche script) gets the values a run would: every
    default a constructor gives a declared key is the declared one."""
    spec = METHODS[method]
    defaults = constructor_defaults(spec.strategy)
    for key, declared in spec.info.keys.items():
        assert key in defaults, (method, key)
        if defaults[key] is not inspect.Parameter.empty:
            assert defaults[key] == declared.default, (method, key, defaults[key])


def reasons(path) -> dict[str, str]:
    """Each key a shipped file sets at its top level or per method (``methods.m.k``) → the
    comment that gives its reason: on its line, or the comment lines right above it (for a
    ``methods:`` entry, also those above its ``methods:`` line). An entry is one line."""
    out: dict[str, str] = {}
    comments: list[str] = []
    block: list[str] = []
    for line in path.read_text().splitlines():
        text, _, comment = line.partition("#")
        if not text.strip():
            comments = comments + [comment.strip()] if comment else []
            continue
        top = re.match(r"^(\w+):", line)
        if top:
            block = comments
            why = " ".join([*comments, comment.strip()]).strip()
            out[top.group(1)] = why
        entry = re.match(r"^\s+(\w+):\s*\{(.*)\}", text)
        if entry:       # the comments above the methods: block, above the entry, on its line
            why = " ".join([*block, *comments, comment.strip()]).strip()
            for key in re.findall(r"(\w+):", entry.group(2)):
                out[f"methods.{entry.group(1)}.{key}"] = why
        comments = []
    return out


def overrides_table() -> list[tuple[str, str, object, object, str]]:
    """(file, key, value, declared default, reason) of every method key a shipped file sets,
    and of every per-method entry."""
    rows = []
    for path in SHIPPED:
        raw = yaml.safe_load(path.read_text())
        why = reasons(path)
        for key, value in raw.items():
            if key in CONFIG_KEYS:
                continue
            owners = [m for m, info in METHOD_INFO.items() if key in info.keys]
            assert owners, f"{path.name}: {key!r} is neither a run key nor a declared key"
            for method in owners:
                default = METHOD_INFO[method].keys[key].default
                assert value != default, (f"{path.name}: {key}: {value!r} is {method}'s "
                                          "declared default; drop it")
            rows.append((path.name, key, value, METHOD_INFO[owners[0]].keys[key].default,
                         why.get(key, "")))
        for method, entries in (raw.get("methods") or {}).items():
            for key, value in entries.items():
                info = METHOD_INFO[method]
                assert key in CONFIG_KEYS or key in info.keys, (path.name, method, key)
                before = (raw.get(key, for_benchmark(path.stem).get(key)) if key in CONFIG_KEYS
                          else raw.get(key, info.keys[key].default))
                assert value != before, (f"{path.name}: methods.{method}.{key}: {value!r} is "
                                         "the value it would have anyway; drop it")
                rows.append((path.name, f"methods.{method}.{key}", value, before,
                             why.get(f"methods.{method}.{key}", "")))
    return rows


def test_the_shipped_configurations_hold_overrides_only_each_with_its_reason():
    rows = overrides_table()
    print("\n| file | key | value | else | reason |\n|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")
    assert rows, "no override found: the table would prove nothing"
    unexplained = [row[:3] for row in rows if len(row[4]) < 20]
    assert not unexplained, f"overrides without a reason beside them: {unexplained}"


def test_uncle_runs_as_its_authors_configure_the_paper_s_benchmarks():
    """UnCLe's values from its authors' files (visprasadh/uncle, config/main): S-CIFAR100's
    c100_10b_s5.yaml, S-TinyImageNet's tiny_20b_s5.yaml; S-CIFAR10 (no file of theirs) the
    five-datasets one, 5d_5b_s5.yaml."""
    files = {"cifar100": {"hnet_hidden": "128,256,512", "beta_reg": 0.1, "gamma_forget": 0.01,
                          "lr": 0.001, "batch_size": 512},
             "tinyimagenet": {"hnet_hidden": "128,256,512", "beta_reg": 0.01,
                              "gamma_forget": 0.01, "lr": 0.001, "batch_size": 512},
             "cifar10": {"hnet_hidden": "128,256,512", "beta_reg": 0.001, "gamma_forget": 0.1,
                         "lr": 0.001, "batch_size": 512}}
    for benchmark, theirs in files.items():
        resolved = resolve_method_config(for_benchmark(benchmark), "uncle")
        assert {k: resolved[k] for k in theirs} == theirs, benchmark
        # every file: embeddings of 32, 100 forget steps, 10 noise draws
        assert (resolved["embedding_dim"], resolved["unlearn_steps"],
                resolved["noise_samples"]) == (32, 100, 10)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_resolved_key_is_its_default_unless_an_override_says_otherwise(path):
    raw = yaml.safe_load(path.read_text())
    config = for_benchmark(path.stem)
    for method, info in METHOD_INFO.items():
        resolved = resolve_method_config(config, method)
        per_method = (raw.get("methods") or {}).get(method, {})
        for key, declared in info.keys.items():
            expected = raw.get(key, declared.default)
            expected = info.settings.get(key, expected)
            expected = per_method.get(key, expected)
            assert resolved[key] == expected, (path.stem, method, key, resolved[key], expected)
        # a key only other methods declare does not reach this method's configuration
        others = {k for m in METHOD_INFO.values() for k in m.keys} - set(info.keys)
        assert not others & set(resolved), (method, sorted(others & set(resolved)))


def test_a_shared_key_reaches_every_method_that_declares_it_and_a_variant_keeps_its_setting():
    config = {**for_benchmark("digits"), "beta": 0.3,
              "methods": {"pall_strict": {"strict_cascade": False}}}
    assert resolve_method_config(config, "pall")["beta"] == 0.3
    assert resolve_method_config(config, "derpp")["beta"] == 0.3
    assert resolve_method_config(config, "pall_beta0")["beta"] == 0.0        # its setting
    strict = resolve_method_config(config, "pall_strict")
    assert (strict["beta"], strict["strict_cascade"]) == (0.0, False)         # per method wins
    assert "beta" not in resolve_method_config(config, "sequential")


def test_a_key_is_refused_where_no_method_or_not_this_method_declares_it():
    with pytest.raises(ValueError, match=r"--set methods.hat.alpha=0.1: method 'hat' takes no "
                                         r"key 'alpha' \(methods that do: wsn, pall, "
                                         r"pall_beta0 and 9 more\); its keys: s_max, lamb"):
        check_setting("methods.hat.alpha", 0.1, "--set methods.hat.alpha=0.1")
    with pytest.raises(ValueError, match=r"--set lamd=0.1: unknown configuration key 'lamd'; "
                                         r"did you mean 'lamb'\?"):
        check_setting("lamd", 0.1, "--set lamd=0.1")
    with pytest.raises(ValueError, match=r"--set alpha=1.5: alpha \(α, per-layer connectivity "
                                         r"of a task subnetwork\) must be in \(0, 1\], got 1.5"):
        check_setting("alpha", 1.5, "--set alpha=1.5")
    with pytest.raises(ValueError, match=r"--set compensate_order=sideways: compensate_order "
                                         r".* must be one of forward, reverse"):
        check_setting("compensate_order", "sideways", "--set compensate_order=sideways")


def test_a_declared_flag_becomes_a_command_line_option(tmp_path):
    extension = Method("flagged_for_test", "pall_avalanche.strategies.sequential:Sequential",
                       exact=False, keys={"pull": Key(0.5, "the pull", low=0, flag=True)})
    register_method(extension)
    try:
        parser = Parser(prog="t")
        add_run_arguments(parser, default_out=str(tmp_path / "out"))
        help_text = " ".join(parser.format_help().split())
        assert "--alpha ALPHA α, per-layer connectivity of a task subnetwork (WSN, PALL;" in \
            help_text
        assert "--pull PULL the pull (flagged_for_test; default 0.5)" in help_text
        args = parse_run_arguments(parser, ["--pull", "0.25", "--alpha", "0.1"])
        config, _, _ = config_from_args(args)
        assert resolve_method_config(config, "flagged_for_test")["pull"] == 0.25
        assert resolve_method_config(config, "wsn")["alpha"] == 0.1
    finally:
        METHOD_INFO.pop("flagged_for_test")
