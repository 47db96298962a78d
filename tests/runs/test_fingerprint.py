"""A record's identity includes the code that writes it (pall_avalanche.runs.fingerprint): the
import closure read from the source, on a package tree written here, and on this package."""

from __future__ import annotations

import hashlib
import json
from functools import partial
from pathlib import Path

from helpers import FAST_CONFIG, seq

from pall_avalanche.catalog import BENCHMARK_INFO, METHOD_INFO, MODEL_INFO
from pall_avalanche.runs import run_record
from pall_avalanche.runs.fingerprint import code_fingerprint, module_closure
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
    assert base != fingerprint("f", **{"strategies/lazy.py": "# changed\n"})
    assert base != fingerprint("g", **{"__init__.py": "# another init\n"})
    assert base != fingerprint("h", **{"lazy/impl.py": "thing = 2\n"})


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
