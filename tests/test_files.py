"""pytest_devcaps.files: atomic writes leave the old file or the new one, and no litter."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pytest_devcaps.files import write_atomic, write_atomic_bytes


def test_writes_replace_and_create_parents(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "report.json"
    write_atomic(path, "first é")
    write_atomic(path, "second")
    assert path.read_text(encoding="utf-8") == "second"
    write_atomic_bytes(path, b"\x00\xff")
    assert path.read_bytes() == b"\x00\xff"
    assert [p.name for p in path.parent.iterdir()] == ["report.json"]


def test_a_failed_write_keeps_the_old_file_and_removes_its_temporary(tmp_path: Path) -> None:
    path = tmp_path / "outcome"
    write_atomic_bytes(path, b"old")
    with pytest.raises(TypeError):
        write_atomic_bytes(path, "not bytes")  # type: ignore[arg-type]
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["outcome"]


def test_imports_neither_torch_nor_pytest() -> None:
    code = ("import sys, pytest_devcaps.files; "
            "print(sorted(m for m in ('torch', 'pytest', '_pytest') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
