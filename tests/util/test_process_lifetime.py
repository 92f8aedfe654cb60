"""Process lifetime: nothing a devcaps child starts outlives the process that started it.

Hostile cases of issue 29 (item 3): a probe's ``setsid`` grandchild and a fork + setsid + exec
child survived pytest; the emu build's compiler outlived a killed ``devcaps emu build``. The
cause of the first two: a worker with threads (torch's) is a zombie leader while its other
threads exit, and the guardian's scan skipped zombies, so it found nothing below and left.
"""

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

from pytest_devcaps._util import process_lifetime
from pytest_devcaps._util.process_lifetime import ENTER_CODE, stop_tree

pytestmark = pytest.mark.skipif(not (sys.platform.startswith("linux") and Path("/proc/self/stat").exists()),
                                reason="the guardian is Linux's (PR_SET_CHILD_SUBREAPER); counts through /proc")


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


def _gone_within(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if all(_gone(pid) for pid in pids):
            return []
        time.sleep(0.05)
    return [pid for pid in pids if not _gone(pid)]


def _pids(path: Path, count: int, owner: subprocess.Popen[bytes] | None = None) -> list[int]:
    deadline = time.monotonic() + 120
    while not (path.exists() and len(path.read_text().split()) >= count):
        assert owner is None or owner.poll() is None, "the process ended before its children started"
        assert time.monotonic() < deadline, "the children never started"
        time.sleep(0.05)
    return [int(word) for word in path.read_text().split()]


def _kill_all(pids: list[int]) -> None:
    for pid in pids:
        if not _gone(pid):
            with contextlib.suppress(ProcessLookupError):  # it may end between check and kill
                os.kill(pid, signal.SIGKILL)


# The worker leaves two sleepers (one in a session of its own, one fork + setsid + exec) from a
# second thread, then its main thread exits alone (pthread_exit): the leader is a zombie while
# the thread and the sleepers live on, as in a torch worker whose threads are still exiting.
_ZOMBIE_LEADER = textwrap.dedent("""
    import ctypes, os, subprocess, threading, time
    def leave_sleepers():
        a = subprocess.Popen(["sleep", "1000"], start_new_session=True)
        b = os.fork()
        if b == 0:
            os.setsid()
            os.execvp("sleep", ["sleep", "1001"])
        with open(sys.argv[2] + ".tmp", "w") as handle:
            handle.write(f"{a.pid} {b}")
        os.replace(sys.argv[2] + ".tmp", sys.argv[2])
        time.sleep(1000)
    threading.Thread(target=leave_sleepers).start()
    time.sleep(0.5)
    ctypes.CDLL(None).pthread_exit(None)
""")


def test_a_zombie_leaders_children_are_found_and_killed(tmp_path: Path) -> None:
    """A stopped child whose leader thread is a zombie while another thread and two sleepers
    (setsid; fork + setsid + exec) live: nothing below it survives."""
    pid_file = tmp_path / "pids"
    child = subprocess.Popen([sys.executable, "-c", ENTER_CODE + _ZOMBIE_LEADER, str(os.getpid()),
                              str(pid_file)], start_new_session=True)
    sleepers: list[int] = []
    try:
        sleepers = _pids(pid_file, 2, child)
        stop_tree(child)
        assert _gone_within(sleepers, 10.0) == [], "a sleeper below a zombie leader survived"
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        _kill_all(sleepers)


def test_process_tree_walks_through_zombies(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    child = subprocess.Popen([sys.executable, "-c", "import sys; " + _ZOMBIE_LEADER, "-",
                              str(pid_file)])
    sleepers: list[int] = []
    try:
        sleepers = _pids(pid_file, 2, child)
        deadline = time.monotonic() + 10
        while not _gone(child.pid):  # the leader thread has exited: a zombie with a live thread
            assert time.monotonic() < deadline
            time.sleep(0.05)
        live, zombies = process_lifetime.process_tree(os.getpid())
        assert child.pid in zombies
        assert set(sleepers) <= set(live)
    finally:
        child.kill()
        child.wait()
        _kill_all(sleepers)


_CONFTEST = textwrap.dedent("""
    import os, subprocess
    import pytest
    from pytest_devcaps import Level, ProbeOutcome

    def probe_escape(device):
        a = subprocess.Popen(["sleep", "1000"], start_new_session=True)
        b = os.fork()
        if b == 0:
            os.setsid()
            os.execvp("sleep", ["sleep", "1001"])
        with open(os.environ["DEVCAPS_TEST_ESCAPEES"], "w") as handle:
            handle.write(f"{a.pid} {b}")
        return ProbeOutcome(Level.NATIVE, "left two sleepers")

    @pytest.hookimpl(optionalhook=True)
    def pytest_devcaps_register_capabilities(registrar):
        registrar.capability("acme.escape", "a probe that leaves sleepers behind")
        registrar.probe("acme.escape", probe_escape)
""")


@pytest.mark.parametrize("round_", range(3))
def test_a_probes_escaped_sleepers_do_not_outlive_pytest(pytester: pytest.Pytester,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         round_: int) -> None:
    """A probe (torch imported in its child, as always) leaves a ``setsid`` sleeper and a
    fork + setsid + exec one; once pytest has ended, neither is alive (three rounds: the race
    lost 3 of 4 times before the fix)."""
    pid_file = pytester.path / "escapees"
    monkeypatch.setenv("DEVCAPS_TEST_ESCAPEES", str(pid_file))
    monkeypatch.setenv("PYTEST_DEVCAPS_CACHE_DIR", str(pytester.path / "cache"))  # probe afresh
    pytester.makeconftest(_CONFTEST)
    pytester.makepyfile("""
        import pytest

        @pytest.mark.requires_capability("acme.escape")
        def test_it():
            pass
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=600)
    sleepers = _pids(pid_file, 2)
    try:
        result.assert_outcomes(passed=1)
        assert _gone_within(sleepers, 5.0) == [], "a probe's sleeper outlived pytest"
    finally:
        _kill_all(sleepers)


_BUILD_DRIVER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from pytest_devcaps.emu import extension
    extension.COMPILE_CODE = (
        "import os, subprocess, time; "
        "a = subprocess.Popen(['sleep', '1000'], start_new_session=True); "
        "open(sys.argv[2] + '/pids.tmp', 'w').write(str(a.pid)); "
        "os.replace(sys.argv[2] + '/pids.tmp', sys.argv[2] + '/pids'); time.sleep(1000)")
    extension.BUILD_TIMEOUT_S = float(sys.argv[2])
    extension.PROGRESS_EVERY_S = 0.2
    try:
        extension._compile_in_child(Path(sys.argv[1]), sys.stderr)
    except extension.EmuBuildError as exc:
        print(exc)
""")


@pytest.mark.parametrize("how", ["killed", "timed out"])
def test_the_emu_builds_children_die_with_the_build(tmp_path: Path, how: str) -> None:
    """The build child's compiler (here a ``setsid`` sleeper) is gone when ``devcaps emu
    build`` is killed (SIGKILL) or gives up at its timeout; before, it ran on."""
    limit = "1.0" if how == "timed out" else "600"
    driver = subprocess.Popen([sys.executable, "-c", _BUILD_DRIVER, str(tmp_path), limit],
                              stdout=subprocess.PIPE)
    sleepers: list[int] = []
    try:
        sleepers = _pids(tmp_path / "pids", 1)
        if how == "killed":
            os.kill(driver.pid, signal.SIGKILL)
        out, _ = driver.communicate(timeout=60)
        if how == "timed out":
            assert b"did not finish in 1 s" in out
        assert _gone_within(sleepers, 10.0) == [], "the build's child outlived the build"
    finally:
        if driver.poll() is None:
            driver.kill()
        driver.wait()
        _kill_all(sleepers)
