"""Worlds are reused between calls of a session, never after a failure, never across a change of
environment, and a reused rank shows the next body a clean process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pytest_devcaps.distributed import DistributedRunError, DistributedRunner, close_worlds
from pytest_devcaps.distributed.pool import WorldPool, session_pool

import _dist_bodies as _bodies
from _procs import HAVE_PROC, gone


@pytest.fixture
def runner() -> DistributedRunner:
    close_worlds()  # each test starts from an empty pool
    yield DistributedRunner("cpu", "gloo", timeout_s=60, launch=None, reuse_worlds=True)
    close_worlds()


def _alive(pid: int) -> bool:
    return not gone(pid)


pytestmark = pytest.mark.skipif(not HAVE_PROC, reason="inspects processes through /proc")


def test_a_world_is_reused_and_a_body_leaves_nothing_behind(runner: DistributedRunner,
                                                             tmp_path: Path) -> None:
    os.chdir(tmp_path)
    first = runner.run(_bodies.dirty_the_process, world_size=2)
    state = runner.run(_bodies.process_state, world_size=2)
    assert [s["pid"] for s in state] == first  # the same rank processes
    for s in state:  # what the first body changed is put back
        assert s["leftover"] is None and s["dtype"] == "torch.float32" and s["grad"] is True
        assert s["seed"] != 0  # reseeded like a new interpreter, not left at manual_seed(0)
        assert s["cwd"] == str(tmp_path)  # each task runs in the caller's directory
    assert len(session_pool()) == 1


def test_a_failed_world_is_closed_and_the_next_call_gets_a_fresh_one(
        runner: DistributedRunner) -> None:
    before = runner.run(_bodies.pid, world_size=2)
    with pytest.raises(DistributedRunError, match="rank 1: raised RuntimeError: rank one fails"):
        runner.run(_bodies.fail_on_rank_one, world_size=2)
    assert not any(_alive(pid) for pid in before)
    after = runner.run(_bodies.pid, world_size=2)
    assert not set(after) & set(before)


def test_other_environment_or_world_size_gets_its_own_world(runner: DistributedRunner) -> None:
    two = runner.run(_bodies.pid, world_size=2)
    one = runner.run(_bodies.pid, world_size=1)
    with_env = runner.run(_bodies.process_state, world_size=1,
                          env={"DEVCAPS_TEST_LEFTOVER": "set by the caller"})
    assert with_env[0]["leftover"] == "set by the caller" and with_env[0]["pid"] != one[0]
    assert runner.run(_bodies.pid, world_size=2) == two
    close_worlds()
    assert not any(_alive(pid) for pid in [*two, *one, with_env[0]["pid"]])


def test_fresh_worlds_when_reuse_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_DEVCAPS_DIST_REUSE", "0")
    runner = DistributedRunner("cpu", "gloo", timeout_s=60, launch=None)
    first = runner.run(_bodies.pid, world_size=1)
    assert runner.run(_bodies.pid, world_size=1) != first
    assert len(session_pool()) == 0 and not _alive(first[0])


class _FakeWorld:
    def __init__(self, size: int) -> None:
        self.size, self.reusable, self.closed = size, True, False

    @property
    def alive(self) -> bool:
        return not self.closed

    def settle(self) -> bool:
        return self.alive

    def close(self) -> None:
        self.closed = True


def test_the_pool_keeps_few_idle_ranks_least_recently_used_out_first() -> None:
    pool = WorldPool(max_idle_ranks=6)
    small, big, other = _FakeWorld(2), _FakeWorld(4), _FakeWorld(2)
    pool.give_back("small", small)  # type: ignore[arg-type]
    pool.give_back("big", big)  # type: ignore[arg-type]
    pool.give_back("other", other)  # type: ignore[arg-type]
    assert small.closed and not big.closed and not other.closed
    assert pool.take("big") is big and pool.take("big") is None
    broken = _FakeWorld(2)
    broken.reusable = False
    pool.give_back("broken", broken)  # type: ignore[arg-type]
    assert broken.closed and len(pool) == 1
    pool.close()
    assert other.closed


SIGTERM_PARENT = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, sys.argv[1])
    import _dist_bodies
    from pytest_devcaps.distributed import spawn_world
    pids = spawn_world(_dist_bodies.pid, (), world_size=2, device="cpu", backend="gloo")
    print(" ".join(map(str, pids)), flush=True)
    sys.stdin.read()  # until the test sends SIGTERM
""")


def test_sigterm_removes_the_run_directories_and_the_ranks(tmp_path: Path) -> None:
    """The pytest process killed by SIGTERM (CI cancelling a job) leaves no devcaps-dist-*
    directory and no rank behind, and still dies of SIGTERM."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp)}
    parent = subprocess.Popen([sys.executable, "-c", SIGTERM_PARENT, str(Path(__file__).parent)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
    assert parent.stdout is not None
    try:
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) == 2 and len(list(temp.glob("devcaps-dist-*"))) == 1
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(timeout=60) == -signal.SIGTERM
    finally:
        if parent.poll() is None:
            parent.kill()
    assert list(temp.glob("devcaps-dist-*")) == []
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in pids):
        assert time.monotonic() < deadline, f"ranks still running: {pids}"
        time.sleep(0.1)
