"""A rank that raises, hangs or segfaults fails its test fast, with every rank's story, and
leaves no process behind; parallel sessions (xdist) do not collide on rendezvous. (Under
torchrun: tests/plugin/test_torchrun.py.)"""

from __future__ import annotations

import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pytest_devcaps.distributed import close_worlds

from _procs import HAVE_PROC, children, gone

pytestmark = pytest.mark.skipif(not HAVE_PROC, reason="counts processes through /proc")

HANG_S = 15
"""The hung world's watchdog: it starts once the ranks have imported torch, and covers the
body's own imports (pytest, the test module), which take seconds on a loaded machine."""

FAILING = textwrap.dedent("""
    import os, sys, time
    import pytest, torch, torch.distributed as dist
    from pytest_devcaps.distributed import DistributedRunner

    def _note_pid(ctx):
        caller = sys._getframe(1).f_code.co_name
        path = os.path.join(os.environ["DEVCAPS_TEST_PIDS"], f"{caller}-{os.getpid()}")
        open(path, "w").close()

    def raises(ctx):
        _note_pid(ctx)
        if ctx.rank == 1:
            raise ValueError("rank one is broken")
        dist.barrier()

    def hangs(ctx):
        _note_pid(ctx)
        if ctx.rank == 1:
            time.sleep(600)
        dist.barrier()

    def segfaults(ctx):
        _note_pid(ctx)
        if ctx.rank == 1:
            import ctypes
            ctypes.string_at(0)
        dist.barrier()

    def works(ctx):
        _note_pid(ctx)
        t = torch.ones(1)
        dist.all_reduce(t)
        return t.item()

    @pytest.fixture
    def distributed():
        return DistributedRunner("cpu", "gloo", timeout_s=60, launch=None)

    def test_raises(distributed):
        distributed.run(raises, world_size=2)

    def test_hangs():
        DistributedRunner("cpu", "gloo", timeout_s=@HANG_S@, launch=None).run(hangs, world_size=2)

    def test_segfaults(distributed):
        distributed.run(segfaults, world_size=2)

    def test_works(distributed):
        assert distributed.run(works, world_size=2) == [2.0, 2.0]
""").replace("@HANG_S@", str(HANG_S))


FAST_S = 30
"""Start-up of two ranks plus the report; generous for loaded CI machines, half the watchdog."""


def test_failing_ranks_fail_fast_with_tracebacks_and_no_orphans(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pids = tmp_path / "pids"
    pids.mkdir()
    monkeypatch.setenv("DEVCAPS_TEST_PIDS", str(pids))
    pytester.makepyfile(test_ranks=FAILING)
    before = children(os.getpid())
    result = pytester.runpytest_inprocess("-p", "no:devcaps", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=3, passed=1)
    reports = {r.nodeid.split("::")[-1]: r for r in
               result.reprec.getreports("pytest_runtest_logreport") if r.when == "call"}  # type: ignore[attr-defined]
    out = result.stdout.str()

    # raised: the exception and the peer's traceback, long before the 60 s watchdog
    assert reports["test_raises"].duration < FAST_S
    result.stdout.fnmatch_lines(["*rank 1: raised ValueError: rank one is broken*"])
    assert 'in raises\n' in out and "rank 0: raised RuntimeError" in out

    # hung: the watchdog stops it; the sleeping rank's stack comes from faulthandler
    assert reports["test_hangs"].duration < HANG_S + FAST_S
    result.stdout.fnmatch_lines(["*rank 1: hung (still running)*",
                                 "*rank 1: stacks when stopped (faulthandler)*"])
    assert "in hangs" in out

    # segfaulted: the signal and the fatal-error dump
    assert reports["test_segfaults"].duration < FAST_S
    assert "watchdog timeout" not in str(reports["test_segfaults"].longrepr)
    assert "watchdog timeout" not in str(reports["test_raises"].longrepr)
    result.stdout.fnmatch_lines(["*rank 1: killed by SIGSEGV*", "*Fatal Python error: Segmentation fault*"])
    assert "in segfaults" in out

    rank_pids = {p.name.split("-")[0]: set() for p in pids.iterdir()}
    for p in pids.iterdir():
        rank_pids[p.name.split("-")[0]].add(int(p.name.split("-")[1]))
    assert sorted(rank_pids) == ["hangs", "raises", "segfaults", "works"]
    assert all(len(found) == 2 for found in rank_pids.values())
    failed = rank_pids["raises"] | rank_pids["hangs"] | rank_pids["segfaults"]
    assert not [pid for pid in failed if not gone(pid)], "orphan rank"
    # the world that worked waits in the pool for the next call, until the session closes it
    assert all(not gone(pid) for pid in rank_pids["works"])
    close_worlds()
    assert not [pid for pid in rank_pids["works"] if not gone(pid)]
    assert children(os.getpid()) <= before


CONCURRENT = textwrap.dedent("""
    import pytest, torch, torch.distributed as dist
    from pytest_devcaps.distributed import DistributedRunner

    def total(ctx, k):
        t = torch.tensor([float(k + ctx.rank)])
        dist.all_reduce(t)
        return t.item()

    @pytest.mark.parametrize("k", range(2))  # one world per xdist worker, at the same time
    def test_world(k):
        runner = DistributedRunner("cpu", "gloo", timeout_s=120, launch=None)
        assert runner.run(total, k, world_size=2) == [2 * k + 1] * 2
""")


def test_parallel_sessions_do_not_collide(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makepyfile(test_concurrent=CONCURRENT)
    result = pytester.runpytest_subprocess("-p", "no:devcaps", "-p", "no:cacheprovider", "-n", "2")
    result.assert_outcomes(passed=2)


ORPHAN_BODY = textwrap.dedent("""
    import os, time

    def sleeper(ctx, pid_dir):
        open(os.path.join(pid_dir, str(os.getpid())), "w").close()
        time.sleep(600)
""")

ORPHAN_PARENT = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])
    import orphan_body
    from pytest_devcaps.distributed import spawn_world
    spawn_world(orphan_body.sleeper, (sys.argv[2],), world_size=2, device="cpu", backend="gloo")
""")


def test_ranks_exit_when_the_parent_dies(tmp_path: Path) -> None:
    """SIGKILL of the pytest process (no cleanup runs there) still leaves no rank behind."""
    import signal
    import subprocess

    (tmp_path / "orphan_body.py").write_text(ORPHAN_BODY)
    (tmp_path / "parent.py").write_text(ORPHAN_PARENT)
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    root = str(Path(__file__).resolve().parents[2])
    temp = tmp_path / "tmp"  # SIGKILL leaves the world's directory: here, not in /tmp
    temp.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]),
           "TMPDIR": str(temp)}
    parent = subprocess.Popen([sys.executable, str(tmp_path / "parent.py"), str(tmp_path),
                               str(pid_dir)], env=env)
    try:
        deadline = time.monotonic() + 120
        while len(list(pid_dir.iterdir())) < 2:
            assert time.monotonic() < deadline, "ranks never started"
            assert parent.poll() is None, "the parent exited early"
            time.sleep(0.1)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    rank_pids = [int(p.name) for p in pid_dir.iterdir()]
    deadline = time.monotonic() + 10
    while not all(gone(pid) for pid in rank_pids):
        assert time.monotonic() < deadline, f"orphaned ranks still running: {rank_pids}"
        time.sleep(0.1)
