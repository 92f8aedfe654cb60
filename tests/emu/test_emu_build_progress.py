"""devcaps emu build is not silent: the compile step says how long it has run, and a build past
its limit is stopped with the folder named."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_devcaps.emu import extension


def test_a_long_compile_reports_its_elapsed_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(extension, "PROGRESS_EVERY_S", 0.2)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.0)"], text=True)
    log = io.StringIO()
    assert extension._wait_with_progress(child, log, Path("/nowhere")) == 0
    lines = log.getvalue().splitlines()
    assert len(lines) >= 2, lines
    assert all(line.startswith("devcaps emu: compiling emu.cpp") and line.endswith("s so far")
               for line in lines)


def test_a_build_past_its_limit_is_killed_and_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(extension, "PROGRESS_EVERY_S", 0.1)
    monkeypatch.setattr(extension, "BUILD_TIMEOUT_S", 0.3)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], text=True)
    with pytest.raises(extension.EmuBuildError, match="did not finish in 0 s .folder /build."):
        extension._wait_with_progress(child, io.StringIO(), Path("/build"))
    assert child.returncode is not None  # killed, not left running
