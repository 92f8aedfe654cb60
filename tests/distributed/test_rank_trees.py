"""A rank and everything it started die with the process that spawned the world, SIGKILL
included: ranks run under a guardian (pytest_devcaps._util.guardian) that kills the whole tree,
processes that left the rank's session and a rank stuck in C code holding the GIL too."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from _procs import HAVE_PROC, gone

pytestmark = pytest.mark.skipif(not (HAVE_PROC and sys.platform.startswith("linux")),
                                reason="the guardian is Linux's; counts processes through /proc")

DRIVER = textwrap.dedent("""
    import sys
    sys.path[:0] = {paths!r}
    import _dist_bodies
    from pytest_devcaps.distributed import DistributedRunner
    DistributedRunner("cpu", "gloo", timeout_s=600, launch=None).run(
        _dist_bodies.escapes_then_holds_the_gil, world_size=2)
""")


def _wait_for_pids(folder: Path, count: int, driver: subprocess.Popen[bytes]) -> list[int]:
    deadline = time.monotonic() + 180  # two ranks import torch on a loaded machine
    while len(list(folder.iterdir())) < count:
        assert driver.poll() is None, "the driver ended before its ranks started"
        assert time.monotonic() < deadline, "the ranks never started"
        time.sleep(0.1)
    return [int(p.name.split("-")[1]) for p in folder.iterdir()]


def _gone_within(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        alive = [pid for pid in pids if not gone(pid)]
        if not alive:
            return []
        time.sleep(0.05)
    return [pid for pid in pids if not gone(pid)]


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_ranks_and_their_escaped_grandchildren_die_with_the_killed_driver(
        tmp_path: Path, sig: int) -> None:
    """Hostile: each of two ranks starts ``sleep 1000`` twice (one ``setsid``), then holds the
    GIL in C code; the driver (pytest) is killed. Ranks and sleepers are gone within 15 s."""
    folder = tmp_path / "pids"
    folder.mkdir()
    code = DRIVER.format(paths=[str(Path(__file__).parent), *sys.path])
    driver = subprocess.Popen([sys.executable, "-c", code],
                              env={**os.environ, "DEVCAPS_TEST_PIDS": str(folder)})
    pids: list[int] = []
    try:
        pids = _wait_for_pids(folder, 6, driver)
        time.sleep(0.5)  # the ranks are inside their C call now
        os.kill(driver.pid, sig)
        driver.wait(timeout=30)
        assert _gone_within(pids, 15.0) == [], "outlived the killed driver"
    finally:
        if driver.poll() is None:
            driver.kill()
        driver.wait()
        for pid in pids:
            if not gone(pid):
                with contextlib.suppress(ProcessLookupError):  # it may end between check and kill
                    os.kill(pid, signal.SIGKILL)
