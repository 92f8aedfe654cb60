"""Packaging: the explicit package list is complete; the wheel carries data, kernels and py.typed."""

from __future__ import annotations

import subprocess
import sys

import zipfile
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
ROOT = Path(__file__).resolve().parents[1]


def _declared() -> tuple[list[str], dict[str, str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return config["packages"], config["package-dir"]


def test_every_package_directory_is_declared() -> None:
    packages, mapping = _declared()
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "pytest_devcaps").rglob("__init__.py")}
    found |= {"devcaps_kernels" + "".join("." + part for part in p.parent.relative_to(ROOT / mapping["devcaps_kernels"]).parts)
              for p in (ROOT / mapping["devcaps_kernels"]).rglob("__init__.py")}
    found.add("pytest_devcaps.profiles")  # data only: the shipped device profiles
    found.add("pytest_devcaps.report.schemas")  # data only: the reports' JSON Schema
    assert sorted(found) == sorted(packages)


@pytest.mark.slow
def test_wheel_contents(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path), str(ROOT)], check=True)
    wheel = next(tmp_path.glob("pytest_devcaps-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        catalogue = archive.read("pytest_devcaps/capabilities.yaml").decode()
        entry_points = next(archive.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    assert "devcaps: 1" in catalogue and "dtype.fp8_e4m3fn" in catalogue
    assert "pytest_devcaps/py.typed" in names
    assert "pytest_devcaps/profiles/nvidia-h200.yaml" in names
    assert "pytest_devcaps/report/schemas/devcaps-report.schema.json" in names
    assert "devcaps_kernels/__init__.py" in names
    assert not any(n.startswith("kernels/") for n in names)
    assert "[pytest11]\ndevcaps = pytest_devcaps.plugin" in entry_points
    assert "devcaps = pytest_devcaps.commands.main:main" in entry_points
