"""A record's identity includes the code that writes it (pall_avalanche.runs.fingerprint): the
import closure read from the source, on a package tree written here and on this package, and
the code without comments, docstrings and layout, on copies of this package edited here."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest
from helpers import FAST_CONFIG, seq

from pall_avalanche.catalog import BENCHMARK_INFO, METHOD_INFO, MODEL_INFO
from pall_avalanche.runs import fingerprint, run_record
from pall_avalanche.runs.fingerprint import ENGINE, code_fingerprint, module_closure
from pall_avalanche.runs.spec import RunSpec, probe_modules

FILES = {
    "__init__.py": "from pall_avalanche import heavy\n",
    "heavy.py": "X = 1\n",
    "core.py": "Y = 2\n",
    "unused.py": "Z = 3\n",
    "runs/__init__.py": "",
    "runs/engine.py": "import os\nfrom pall_avalanche.core import Y\nfrom . import store\n"
                      "from pall_avalanche.lazy import thing\n",
    "lazy/__init__.py": "_WHERE = {'thing': 'impl', 'other': 'not_a_module'}\n",
    "lazy/impl.py": "thing = 1\n",
    "runs/store.py": "def f():\n    from ..strategies import lazy\n    return lazy\n",
    "strategies/__init__.py": "from pall_avalanche.strategies import other\n",
    "strategies/lazy.py": "",
    "strategies/other.py": "",
    "strategies/mine.py": "from pall_avalanche.strategies.lazy import thing\n",
}


def tree(root: Path, **changed: str) -> Path:
    package = root / "pall_avalanche"
    for name, text in {**FILES, **changed}.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return package


def test_closure_follows_absolute_relative_and_inner_imports(tmp_path):
    package = tree(tmp_path)
    closure = module_closure(("pall_avalanche.runs.engine", "pall_avalanche.strategies.mine"),
                             package)
    # a package's __init__ counts with its own text, not with what it re-exports
    # a name imported from a package that loads it lazily: the submodule its text names
    assert sorted(closure) == ["pall_avalanche", "pall_avalanche.core", "pall_avalanche.lazy",
                               "pall_avalanche.lazy.impl", "pall_avalanche.runs",
                               "pall_avalanche.runs.engine", "pall_avalanche.runs.store",
                               "pall_avalanche.strategies", "pall_avalanche.strategies.lazy",
                               "pall_avalanche.strategies.mine"]
    assert closure["pall_avalanche.strategies"] == package / "strategies" / "__init__.py"


def test_fingerprint_moves_with_the_closure_only(tmp_path):
    def fingerprint(name: str, **changed: str) -> str:
        package = tree(tmp_path / name, **changed)
        return code_fingerprint(("pall_avalanche.strategies.mine",), package)

    base = fingerprint("a")
    assert base == fingerprint("b")                                  # same text, same print
    assert base == fingerprint("c", **{"unused.py": "Z = 4\n"})      # not imported
    assert base == fingerprint("d", **{"heavy.py": "X = 2\n"})       # only re-exported
    assert base != fingerprint("e", **{"core.py": "Y = 3\n"})
    assert base != fingerprint("f", **{"strategies/lazy.py": "W = 0\n"})
    assert base != fingerprint("g", **{"__init__.py": "from pall_avalanche import core\n"})
    assert base != fingerprint("h", **{"lazy/impl.py": "thing = 2\n"})
    # the code counts, not its comments, docstrings or layout
    assert base == fingerprint("i", **{"strategies/lazy.py": "# changed\n", "core.py":
                                       '"""Y."""\nY  =  2   # two\n\n\n'})


def test_a_record_s_hash_includes_this_package_s_code():
    spec = RunSpec.of("sequential", 0, FAST_CONFIG, seq("L0 U0"))
    entries = (METHOD_INFO["sequential"], MODEL_INFO[FAST_CONFIG["model"]],
               BENCHMARK_INFO["digits"])
    modules = tuple(sorted(e.where.split(":")[0] for e in entries))
    code = code_fingerprint(modules)
    assert spec.code == code
    by_hand = hashlib.sha1(json.dumps({**spec.described(), "code": code}, sort_keys=True,
                                      default=str).encode()).hexdigest()[:10]
    assert spec.hash == by_hand
    closure = module_closure(("pall_avalanche.runs.engine", *modules))
    assert not {"pall_avalanche.audit", "pall_avalanche.paper", "pall_avalanche.reports"} & {
        name.rpartition(".")[0] for name in closure}
    assert {"pall_avalanche.strategies.base", "pall_avalanche.evaluation.metrics",
            "pall_avalanche.models.small", "pall_avalanche.data"} <= set(closure)
    record = run_record("sequential", 0, {**FAST_CONFIG, "epochs": 1}, requests=seq("L0 U0"))
    assert record["code"] == RunSpec.of("sequential", 0, {**FAST_CONFIG, "epochs": 1},
                                        seq("L0 U0")).code


class _Probe:
    """A probe riding along a run (this test module's: outside the package)."""

    plugins = ()

    def finish(self, strategy, benchmark) -> dict:
        return {"tasks": list(strategy.active_tasks)}


def test_a_probe_s_module_is_part_of_a_record_s_code():
    from pall_avalanche.audit.probes import AuditProbe

    config = {**FAST_CONFIG, "epochs": 1, "train_per_task": 40}
    plain = RunSpec.of("sequential", 0, config, seq("L0 U0"))
    with_audit = RunSpec.of("sequential", 0, config, seq("L0 U0"),
                            modules=[AuditProbe.__module__])
    assert with_audit.code == code_fingerprint(tuple(sorted(
        [*(e.where.split(":")[0] for e in (METHOD_INFO["sequential"], MODEL_INFO["mlp"],
                                            BENCHMARK_INFO["digits"])), AuditProbe.__module__])))
    assert with_audit.code != plain.code
    # run_record takes the probe factory's module itself; one outside the package adds nothing
    record = run_record("sequential", 0, config, requests=seq("L0 U0"), probe=_Probe)
    assert record["probe"] == {"tasks": []} and record["code"] == plain.code
    assert probe_modules(partial(AuditProbe)) == ("pall_avalanche.audit.probes",)


#: The strategies' modules the runner may import: the template every method builds on and the
#: registry that names the methods (the package's ``__init__`` counts with its own text only).
INFRASTRUCTURE = {"pall_avalanche.strategies", "pall_avalanche.strategies.base",
                  "pall_avalanche.strategies.registry", "pall_avalanche.strategies.template",
                  *(f"pall_avalanche.strategies.template.{part}" for part in (
                      "lifecycle", "optimization", "permanence", "routing", "speed", "state"))}
PACKAGE = Path(fingerprint.__file__).resolve().parent.parent


def run_modules(method: str) -> tuple[str, ...]:
    """The modules RunSpec fingerprints for ``method`` on FAST_CONFIG's model and benchmark."""
    entries = (METHOD_INFO[method], MODEL_INFO[FAST_CONFIG["model"]],
               BENCHMARK_INFO[FAST_CONFIG["benchmark"]])
    return tuple(sorted({e.where.partition(":")[0] for e in entries}))


def strategies(closure: dict) -> set[str]:
    return {name for name in closure if name.startswith("pall_avalanche.strategies")}


def test_the_runner_imports_no_method_s_strategy():
    closure = module_closure(ENGINE)
    assert strategies(closure) <= INFRASTRUCTURE
    assert not {info.where.partition(":")[0] for info in METHOD_INFO.values()} & set(closure)
    # the catalog names every strategy as "pall_avalanche.strategies.pall:PALL": not followed
    assert "pall_avalanche.catalog" in closure
    assert strategies(module_closure((*ENGINE, *run_modules("pall")))) - INFRASTRUCTURE == {
        "pall_avalanche.strategies.pall", "pall_avalanche.strategies.subnetwork",
        "pall_avalanche.strategies.shared_keys"}
    assert strategies(module_closure((*ENGINE, *run_modules("sequential")))) - INFRASTRUCTURE \
        == {"pall_avalanche.strategies.sequential"}


def reword(text: str) -> str:
    """Docstrings reworded (the module's, the first indented one) and comments added."""
    assert text.startswith('"""')
    text, n = re.subn(r'^(\s+)"""', r'\1"""Reworded. ', f'"""Reworded. {text[3:]}', count=1,
                      flags=re.MULTILINE)
    future = "\nfrom __future__ import annotations\n"
    assert n == 1 and future in text
    return text.replace(future, "\n# a comment\nfrom __future__ import annotations  # more\n")


def reformat(text: str) -> str:
    """Every call of two plain names on one line split over two lines, spaced otherwise."""
    name = r"[a-z_][a-z_.0-9]*"
    text, n = re.subn(rf"^(\s+)([^#\"'\s][^#\"']*\()({name}), ({name}\))$",
                      r"\1\2 \3 ,\n\1        \4", text, flags=re.MULTILINE)
    assert n
    return text


def recode(text: str) -> str:
    return text + "\n_EDITED = 1\n"


@pytest.fixture
def fingerprints(tmp_path) -> Callable[..., dict[str, str]]:
    """PALL's, Sequential's and HAT's fingerprints, as RunSpec computes them, on a copy of this
    package with ``edits`` (file → edit) made."""
    def compute(name: str, edits: dict[str, Callable[[str], str]] | None = None
                ) -> dict[str, str]:
        root = tmp_path / name / "pall_avalanche"
        shutil.copytree(PACKAGE, root, ignore=shutil.ignore_patterns("__pycache__"))
        for file, edit in (edits or {}).items():
            path = root / file
            path.write_text(edit(path.read_text(encoding="utf-8")), encoding="utf-8")
        return {m: code_fingerprint(run_modules(m), root) for m in ("pall", "sequential", "hat")}
    return compute


def test_a_record_s_identity_follows_its_own_code(fingerprints):
    base = fingerprints("base")
    assert base == {m: RunSpec.of(m, 0, FAST_CONFIG).code for m in base}
    assert len(set(base.values())) == 3
    files = ("strategies/hat.py", "strategies/pall.py", "runs/engine.py")
    assert fingerprints("reworded", dict.fromkeys(files, reword)) == base
    assert fingerprints("reformatted", dict.fromkeys(files, reformat)) == base
    changed = fingerprints("pall", {"strategies/pall.py": recode})
    assert changed["pall"] != base["pall"] and {**changed, "pall": base["pall"]} == base
    changed = fingerprints("hat", {"strategies/hat.py": recode})
    assert changed["hat"] != base["hat"] and {**changed, "hat": base["hat"]} == base
    changed = fingerprints("engine", {"runs/engine.py": recode})
    assert all(changed[m] != base[m] for m in base)
