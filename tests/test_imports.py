"""Every module of the package imports on its own in a fresh interpreter (no import cycle
that works only through import order)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "pall_avalanche"
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


def test_the_core_imports_no_masks_or_timm():
    # the request protocol is a leaf: checkpoints learn MaskSet from masks, not the reverse
    probe = ("import sys, pall_avalanche.core; "
             "print(sorted({'pall_avalanche.masks', 'timm'} & set(sys.modules)))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_package_stays_in_small_rooms():
    # the package root holds at most 12 modules and no file grows past 500 lines
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= 12, root
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 500}
    assert long == {}
