"""The package's layers, as pyproject.toml declares them to import-linter (every import
counts, inside functions too), hold; every module imports on its own in a fresh interpreter
(no import cycle that works only through import order); the modules stay small."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "pall_avalanche"
MODULES = sorted(
    ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
    for path in PACKAGE.rglob("*.py"))


def imports_alone(module: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True,
                          text=True, timeout=120)


def test_the_rehearsal_module_imports_first():
    # the shared plugins ↔ strategies.base was a cycle that only import order hid
    result = imports_alone("pall_avalanche.rehearsal")
    assert result.returncode == 0, result.stderr


@pytest.mark.slow  # one fresh interpreter per module: ~4 s each
@pytest.mark.parametrize("module", MODULES)
def test_every_module_imports_alone(module):
    result = imports_alone(module)
    assert result.returncode == 0, result.stderr


def lint_imports(config: Path, root: Path = ROOT) -> subprocess.CompletedProcess:
    """import-linter's check of ``config`` on the package under ``root``."""
    code = ("import sys; from importlinter.cli import lint_imports; "
            f"sys.exit(lint_imports(config_filename={str(config)!r}, no_cache=True))")
    return subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(root)})


def test_the_layer_contract_holds():
    result = lint_imports(ROOT / "pyproject.toml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 kept, 0 broken" in result.stdout


def test_the_layer_contract_catches_an_import_inside_a_function(tmp_path):
    # the same contract on a copy of the package where the catalog (the lowest layer but
    # one) imports a strategy inside a function, as it once did for Table 1's size symbol
    copy = tmp_path / "pall_avalanche"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    catalog = copy / "catalog" / "registration.py"
    catalog.write_text(catalog.read_text() + "\n\ndef _size():\n"
                       "    from pall_avalanche.strategies.independent import Independent\n"
                       "    return Independent\n")
    config = tmp_path / "pyproject.toml"
    config.write_text((ROOT / "pyproject.toml").read_text())
    result = lint_imports(config, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert ("pall_avalanche.catalog is not allowed to import pall_avalanche.strategies"
            in result.stdout)


def test_the_core_imports_no_masks_runs_reports_or_timm():
    # the request protocol is a leaf: checkpoints learn MaskSet from masks, not the reverse
    heavy = ["pall_avalanche.masks", "pall_avalanche.runs", "pall_avalanche.reports",
             "pall_avalanche.strategies", "timm"]
    probe = ("import sys, pall_avalanche.core; "
             f"print(sorted(m for m in {heavy!r} if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_package_stays_in_small_modules():
    # the package root holds at most 12 modules, no file grows past 400 lines and no file of
    # the strategy template past 300 (the request loop and its lifecycle are one module: a
    # guide, not a reason to split a concept); no two modules share a file name
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= 12, root
    lines = {str(p.relative_to(PACKAGE)): len(p.read_text().splitlines())
             for p in PACKAGE.rglob("*.py")}
    assert {name: n for name, n in lines.items() if n > 400} == {}
    template = {name: n for name, n in lines.items()
                if name.startswith("strategies/template/") or name == "strategies/base.py"}
    assert len(template) >= 6 and {n: k for n, k in template.items() if k > 300} == {}
    names = Counter(Path(name).name for name in lines
                    if not Path(name).name.startswith("__"))
    assert {name: k for name, k in names.items() if k > 1} == {}
