"""The sdist carries the whole test suite, and its tests run from the unpacked tree against the
package built from it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_SKIP = shutil.ignore_patterns(".git", ".venv*", "venv", "build", "dist", "*.egg-info",
                               "__pycache__", "*.pyc", ".pytest_cache", ".mypy_cache", ".*cache*")
_BUILD = "from setuptools import build_meta as b, sys; print(getattr(b, sys.argv[1])(sys.argv[2]))"


def _build(kind: str, source: Path, out: Path) -> Path:
    """``build_sdist``/``build_wheel`` of setuptools' PEP 517 backend (no isolation, no network)."""
    done = subprocess.run([sys.executable, "-c", _BUILD, kind, str(out)], cwd=source,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out / done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist, built from a copy of the tree (the build writes egg-info beside the sources),
    unpacked."""
    work = tmp_path_factory.mktemp("sdist")
    source = work / "source"
    shutil.copytree(ROOT, source, ignore=_SKIP, symlinks=True)
    archive = _build("build_sdist", source, work)
    with tarfile.open(archive) as tar:
        tar.extractall(work / "unpacked", filter="data")
    (tree,) = (work / "unpacked").iterdir()
    return tree


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}


def test_the_sdist_holds_the_whole_test_suite(unpacked: Path) -> None:
    shipped = _files(unpacked)
    tests = {f"tests/{name}" for name in _files(ROOT / "tests")}
    assert tests <= shipped, sorted(tests - shipped)
    assert {"tests/conftest.py", "tests/distributed/_dist_bodies.py", "tests/data/lint_cases.txt",
            "LICENSE", "CHANGELOG.md", "README.md", "capabilities.yaml", "docs/ARCHITECTURE.md",
            "docs/REPORTS.md", "pytest_devcaps/capabilities.yaml",
            "pytest_devcaps/report/schemas/devcaps-report.schema.json"} <= shipped
    assert "BSD 3-Clause License" in (unpacked / "LICENSE").read_text()


def test_the_unpacked_tests_run_against_the_package_built_from_it(
        unpacked: Path, tmp_path: Path) -> None:
    """Collect the whole suite and run two small files, importing the package from the unpacked
    sdist and a wheel built from it (``devcaps_kernels``), not from this checkout."""
    wheel = _build("build_wheel", unpacked, tmp_path)
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
           "PYTEST_ADDOPTS": "-p no:randomly -p no:cacheprovider"}
    where = subprocess.run([sys.executable, "-c", "import pytest_devcaps, devcaps_kernels; "
                            "print(pytest_devcaps.__file__); print(devcaps_kernels.__file__)"],
                           cwd=unpacked, env=env, capture_output=True, text=True)
    # the unpacked sources (the working directory comes first on sys.path) or the wheel: never
    # this checkout
    assert [line.startswith((str(unpacked), str(site))) for line in where.stdout.split()] == \
        [True, True], where
    collected = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q"],
                               cwd=unpacked, env=env, capture_output=True, text=True, timeout=600)
    assert collected.returncode == 0, collected.stdout[-3000:] + collected.stderr[-3000:]
    assert "tests/distributed/test_world_reuse.py::" in collected.stdout
    ran = subprocess.run([sys.executable, "-m", "pytest", "-q", "tests/report/test_merge.py",
                          "tests/util/test_qualnames.py"], cwd=unpacked, env=env, capture_output=True,
                         text=True, timeout=600)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert " passed" in ran.stdout.splitlines()[-1] and "failed" not in ran.stdout.splitlines()[-1]
