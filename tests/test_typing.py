"""The package and the kernels type-check under mypy --strict (configured in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_strict_passes(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "pytest_devcaps", "kernels", "--cache-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
