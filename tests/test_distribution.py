"""A release-ready package: the version in one place, a changelog entry for it, and (slow) an
sdist and a wheel that build, whose metadata renders, that carry the configurations and
``py.typed``, and whose wheel installs into a fresh virtual environment where the commands
work."""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def _version() -> str:
    text = (ROOT / "pall_avalanche" / "__init__.py").read_text()
    return re.search(r'^__version__ = "([^"]+)"$', text, re.M)[1]


def test_the_version_lives_in_one_place_and_the_changelog_names_it():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "pall_avalanche.__version__"}
    changelog = (ROOT / "CHANGELOG.md").read_text()
    released = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", changelog, re.M)
    assert released and released[0] == _version()
    assert "## [Unreleased]" in changelog
    assert (ROOT / "pall_avalanche" / "py.typed").is_file()
    assert (ROOT / ".pre-commit-config.yaml").is_file()


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    pytest.importorskip("build", reason="the build frontend comes with the dev extra")
    out = tmp_path_factory.mktemp("dist")
    # --no-isolation: the build backend (setuptools) of this environment, nothing downloaded
    subprocess.run([sys.executable, "-m", "build", "--sdist", "--wheel", "--no-isolation",
                    "--outdir", str(out), str(ROOT)],
                   check=True, capture_output=True, text=True, timeout=600)
    return out


@pytest.mark.slow
def test_the_sdist_and_wheel_build_and_carry_what_the_package_needs(dist):
    version = _version()
    wheel = next(dist.glob(f"pall_avalanche-{version}-py3-none-any.whl"))
    sdist = next(dist.glob(f"pall_avalanche-{version}.tar.gz"))
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "pall_avalanche/py.typed" in names
    configs = {p.name for p in (ROOT / "pall_avalanche" / "configs").glob("*.yaml")}
    assert {f"pall_avalanche/configs/{c}" for c in configs} <= names
    entry_points = zipfile.ZipFile(wheel).read(
        f"pall_avalanche-{version}.dist-info/entry_points.txt").decode()
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert all(f"{name} = {target}" in entry_points for name, target in scripts.items())
    with tarfile.open(sdist) as tar:
        members = {Path(m).relative_to(f"pall_avalanche-{version}").as_posix()
                   for m in tar.getnames() if "/" in m}
    assert {"pall_avalanche/py.typed", "README.md", "pyproject.toml"} <= members
    assert {f"pall_avalanche/configs/{c}" for c in configs} <= members
    pytest.importorskip("twine", reason="twine comes with the dev extra")
    check = subprocess.run([sys.executable, "-m", "twine", "check", "--strict",
                            str(wheel), str(sdist)], capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr   # the metadata renders


@pytest.mark.slow
def test_the_wheel_installs_into_a_fresh_environment_and_its_commands_run(dist, tmp_path):
    """A virtual environment that sees this interpreter's packages (torch, Avalanche: nothing
    is downloaded) but not this checkout; the wheel installed without dependencies."""
    wheel = next(dist.glob("pall_avalanche-*.whl"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True, timeout=300)
    python = venv / "bin" / "python"
    # --force-reinstall: an installed pall-avalanche of the outer environment (an editable
    # install, say) is left alone and this wheel goes into the virtual environment
    subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "--quiet",
                    "--force-reinstall", str(wheel)], check=True, timeout=300)
    elsewhere = tmp_path / "elsewhere"       # no checkout here: the installed package only
    elsewhere.mkdir()
    where = subprocess.run([str(python), "-c", "import pall_avalanche; "
                            "print(pall_avalanche.__file__, pall_avalanche.__version__)"],
                           cwd=elsewhere, capture_output=True, text=True, check=True,
                           env={"PATH": str(venv / "bin"), "HOME": str(tmp_path)})
    path, version = where.stdout.split()
    assert Path(path).is_relative_to(venv) and version == _version(), where.stdout
    result = subprocess.run([str(venv / "bin" / "pall-table1"), "--help"], cwd=elsewhere,
                            capture_output=True, text=True, timeout=120,
                            env={"PATH": str(venv / "bin"), "HOME": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert "--benchmark" in result.stdout and "pall-table1" in result.stdout
