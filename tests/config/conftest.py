from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Callable

import pytest

from pytest_devcaps.config import Catalogue, load_catalogue


@pytest.fixture(scope="session")
def catalogue() -> Catalogue:
    return load_catalogue()


@pytest.fixture
def write_yaml(tmp_path: Path) -> Callable[[str, str], Path]:
    """Write dedented YAML text to ``tmp_path/name`` and return the path."""

    def write(text: str, name: str = "file.yaml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
        return path

    return write
