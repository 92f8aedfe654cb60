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

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(),
                                reason="counts processes through /proc")

FAILING = textwrap.dedent("""
    import os, time
    import pytest, torch, torch.distributed as dist
    from pytest_devcaps.distributed import DistributedRunner

    def _note_pid(ctx):
        path = os.path.join(os.environ["DEVCAPS_TEST_PIDS"], f"{os.getpid()}")
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
        DistributedRunner("cpu", "gloo", timeout_s=8, launch=None).run(hangs, world_size=2)

    def test_segfaults(distributed):
        distributed.run(segfaults, world_size=2)

    def test_works(distributed):
        assert distributed.run(works, world_size=2) == [2.0, 2.0]
""")


FAST_S = 30
"""Start-up of two ranks plus the report; generous for loaded CI machines, half the watchdog."""


def _children(pid: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(entry.name))
    return found


def test_failing_ranks_fail_fast_with_tracebacks_and_no_orphans(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pids = tmp_path / "pids"
    pids.mkdir()
    monkeypatch.setenv("DEVCAPS_TEST_PIDS", str(pids))
    pytester.makepyfile(test_ranks=FAILING)
    before = _children(os.getpid())
    result = pytester.runpytest_inprocess("-p", "no:devcaps", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=3, passed=1)
    reports = {r.nodeid.split("::")[-1]: r for r in
               result.reprec.getreports("pytest_runtest_logreport") if r.when == "call"}  # type: ignore[attr-defined]
    out = result.stdout.str()

    # raised: the exception and the peer's traceback, long before the 60 s watchdog
    assert reports["test_raises"].duration < FAST_S
    result.stdout.fnmatch_lines(["*rank 1: raised ValueError: rank one is broken*"])
    assert 'in raises\n' in out and "rank 0: raised RuntimeError" in out

    # hung: the watchdog (8 s) stops it; the sleeping rank's stack comes from faulthandler
    assert reports["test_hangs"].duration < 8 + FAST_S
    result.stdout.fnmatch_lines(["*rank 1: hung (still running)*",
                                 "*rank 1: stacks when stopped (faulthandler)*"])
    assert "in hangs" in out

    # segfaulted: the signal and the fatal-error dump
    assert reports["test_segfaults"].duration < FAST_S
    assert "watchdog timeout" not in str(reports["test_segfaults"].longrepr)
    assert "watchdog timeout" not in str(reports["test_raises"].longrepr)
    result.stdout.fnmatch_lines(["*rank 1: killed by SIGSEGV*", "*Fatal Python error: Segmentation fault*"])
    assert "in segfaults" in out

    rank_pids = [int(p.name) for p in pids.iterdir()]
    assert len(rank_pids) == 8
    assert not [pid for pid in rank_pids if Path(f"/proc/{pid}").exists()], "orphan rank"
    assert _children(os.getpid()) <= before


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


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"  # exited; only waiting for init to reap it


def test_ranks_exit_when_the_parent_dies(tmp_path: Path) -> None:
    """SIGKILL of the pytest process (no cleanup runs there) still leaves no rank behind."""
    import signal
    import subprocess

    (tmp_path / "orphan_body.py").write_text(ORPHAN_BODY)
    (tmp_path / "parent.py").write_text(ORPHAN_PARENT)
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
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
    while not all(_gone(pid) for pid in rank_pids):
        assert time.monotonic() < deadline, f"orphaned ranks still running: {rank_pids}"
        time.sleep(0.1)
