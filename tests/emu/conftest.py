"""emu tests: the build is shared by the whole session (built here once if missing), in the
emu cache of the environment the session started in, not in each test's fresh probe cache."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import pytest
import torch

from pytest_devcaps.emu import DEVICES_ENV, VISIBLE_ENV
from pytest_devcaps.emu.extension import CACHE_ENV, build_root, ensure_built, toolchain_problem

#: Read at import, before the autouse fixture points the devcaps cache at a temporary folder.
EMU_CACHE = build_root()


@pytest.fixture(scope="session")
def emu_build() -> Path:
    """The built library (built now when missing); skips, saying why, without a toolchain."""
    problem = toolchain_problem()
    if problem is not None:
        pytest.skip(f"the emu backend needs a C++ toolchain: {problem}")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_ENV, str(EMU_CACHE))
        path, _ = ensure_built(str(torch.__version__))
    return path


@pytest.fixture
def emu_env(emu_build: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[int], None]:
    """``emu_env(n)``: subprocesses started after it see ``n`` emu devices."""
    def give(count: int) -> None:
        monkeypatch.setenv(CACHE_ENV, str(EMU_CACHE))
        monkeypatch.setenv(DEVICES_ENV, str(count))
        monkeypatch.delenv(VISIBLE_ENV, raising=False)
        monkeypatch.delenv("TORCH_DEVICE_BACKEND_AUTOLOAD", raising=False)

    return give


def run_env(**extra: str) -> dict[str, str]:
    return dict(os.environ, **extra)
