"""pytest under torchrun: rank devices, rank-0 output, failures of every rank on rank 0, per-rank
JSON reports, one collection order (pytest-randomly too), and the rank watchdog under
pytest-timeout. The launched runs start ``torchrun --nproc-per-node 2`` on the CPU."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from pytest_devcaps.errors import ConfigError
from pytest_devcaps.commands.main import main
from pytest_devcaps._util.host import host_name
from pytest_devcaps.distributed.ranks import (LaunchInfo, check_report_path, launched_world,
                                  report_path)
from pytest_devcaps.parallel.torchrun import QuietStream, describe_difference

from _acme import acme_conftest

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(),
                                reason="torchrun's local agent needs a POSIX host")

# -- unit: the launcher's environment and report paths ------------------------------------------


def test_launched_world_reads_the_launcher_environment() -> None:
    assert launched_world({}) is None
    assert launched_world({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1"}) == LaunchInfo(3, 8, 1)
    with pytest.raises(ConfigError, match="RANK=4 is not a rank of WORLD_SIZE=4"):
        launched_world({"RANK": "4", "WORLD_SIZE": "4"})
    with pytest.raises(ConfigError, match="expected integers"):
        launched_world({"RANK": "one", "WORLD_SIZE": "2"})


def test_report_path_placeholders() -> None:
    """Every rank writes its report (a rank that dies before writing is known missing)."""
    rank1 = LaunchInfo(rank=1, world_size=2, local_rank=1)
    assert report_path("r-{rank}.json", rank1) == "r-1.json"
    assert report_path("out/r.json", rank1) == "out/r-rank1.json"  # beside rank 0's
    assert report_path("r.json", LaunchInfo(0, 2, 0)) == "r.json"
    assert report_path("r.json", None) == "r.json"
    assert report_path("report", rank1) == "report-rank1"
    assert report_path(".json", rank1) == ".json-rank1"
    second_host = LaunchInfo(rank=2, world_size=4, local_rank=0)
    assert report_path("{host}.json", second_host) == f"{host_name()}.json"  # first of its host
    assert report_path("{host}.json", rank1) == f"{host_name()}-rank1.json"
    check_report_path("out/{host}-{rank}-{local_rank}-of-{world_size}.json")
    with pytest.raises(ConfigError, match=r"unknown placeholder \{rnak\}.*did you mean 'rank'"):
        check_report_path("r-{rnak}.json")


def test_a_quiet_rank_says_only_what_other_threads_write() -> None:
    """The main thread's terminal output is dropped; pytest-timeout's dump from its timer
    thread gets through."""
    target = io.StringIO()
    stream = QuietStream(target)
    assert stream.write("PASSED\n") == 7 and not stream.isatty()
    timer = threading.Thread(target=stream.write, args=("+++ Timeout +++\n",))
    timer.start()
    timer.join()
    stream.flush()
    assert target.getvalue() == "+++ Timeout +++\n"


def test_collection_differences_name_the_ids() -> None:
    zero = ["t.py::a", "t.py::b", "t.py::c"]
    assert describe_difference(zero, ["t.py::a", "t.py::c", "t.py::x"], 1) == \
        "  rank 1: only rank 0 has t.py::b; only rank 1 has t.py::x"
    reordered = describe_difference(zero, ["t.py::a", "t.py::c", "t.py::b"], 3)
    assert "test 2 is t.py::b on rank 0 but t.py::c on rank 3" in reordered


# -- pytest-timeout: the rank watchdog fires first ----------------------------------------------


def test_watchdog_follows_pytest_timeout(pytester: pytest.Pytester) -> None:
    pytest.importorskip("pytest_timeout")
    pytester.makepyfile(
        """
        import pytest

        def test_option(distributed):
            assert distributed.timeout_s == pytest.approx(16.0)  # 0.8 x --timeout=20

        @pytest.mark.timeout(10)
        def test_marker(distributed):
            assert distributed.timeout_s == pytest.approx(8.0)

        @pytest.mark.timeout(0)
        def test_off(distributed):
            assert distributed.timeout_s is None  # the harness default
        """
    )
    result = pytester.runpytest("--timeout=20", "--devcaps-devices=cpu")
    result.assert_outcomes(passed=3)


# -- torchrun --nproc-per-node 2 -----------------------------------------------------------------

ORDER_CONFTEST = """
import os

import pytest


@pytest.fixture(autouse=True)
def _log_order(request):
    with open(os.environ["PIN_LOG"], "a") as log:
        log.write(f"rank {os.environ['RANK']} ran {request.node.nodeid}\\n")
"""

LAUNCHED = textwrap.dedent("""
    import os
    import pytest, torch, torch.distributed as dist
    from pytest_devcaps.distributed import DistributedRunner

    def total(ctx):
        assert not ctx.spawned and ctx.world_size == 2
        t = torch.tensor([float(ctx.rank + 1)])
        dist.all_reduce(t)
        return (ctx.rank, t.item())

    @pytest.fixture
    def distributed():
        return DistributedRunner("cpu", "gloo", timeout_s=60)

    def test_in_process(distributed):
        assert distributed.run(total, world_size=2) == [(0, 3.0), (1, 3.0)]
        assert distributed.run(total, world_size=2) == [(0, 3.0), (1, 3.0)]  # group reused

    def test_other_world_size(distributed):
        distributed.run(total, world_size=4)

    def broken_on_one(ctx):
        if ctx.rank == 1:
            raise KeyError("rank one lost its key")
        return ctx.rank

    def test_failure_reaches_every_rank(distributed):
        distributed.run(broken_on_one, world_size=2)

    def test_only_rank_one_fails():
        assert os.environ["RANK"] != "1", "rank one disagrees"

    def test_rank_device(device):
        if device.type == "acme":
            assert device.index == int(os.environ["LOCAL_RANK"])
""")


def _torchrun(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.run(sys.executable, "-m", "torch.distributed.run", "--standalone",
                        "--nproc-per-node", "2", "-m", "pytest", "-p", "no:cacheprovider",
                        "-p", "no:xdist", "-rs", *args, timeout=240)


def _order(log: Path, rank: int) -> list[str]:
    prefix = f"rank {rank} ran "
    return [line[len(prefix):] for line in log.read_text().splitlines() if line.startswith(prefix)]


def test_torchrun_ranks_run_as_one(pytester: pytest.Pytester, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank devices, rank-0 output with every rank's failures, one order (pytest-randomly
    included, when installed, without the old ``-p no:randomly``), per-rank JSON reports."""
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)  # let pytest-randomly load (if installed)
    log = tmp_path / "order.log"
    monkeypatch.setenv("PIN_LOG", str(log))
    pytester.makeconftest(acme_conftest(count=2, who="RANK") + ORDER_CONFTEST)
    pytester.makepyfile(test_launched=LAUNCHED)
    result = _torchrun(pytester, "--devcaps-json=report-{rank}.json", "--devcaps-probe-timeout=30")
    out = result.stdout.str() + result.stderr.str()
    assert result.ret != 0, out

    # rank 0 alone prints, and reports rank 1's failures with its id
    assert out.count("test session starts") == 1, out
    assert "devcaps: rank 0 of 2 (local rank 0)" in out
    assert out.count("1 failed, 4 passed, 1 skipped") == 1, out  # rank 0's own
    assert "rank 1: raised KeyError: 'rank one lost its key'" in out
    assert "needs world size 4; the launcher started 2" in out
    result.stdout.fnmatch_lines(["*devcaps: other ranks*",
                                 "rank 1 on *: 2 failed, 3 passed, 1 skipped (exit status 1)"])
    result.stdout.fnmatch_lines_random([  # in the order the ranks ran them
        "FAILED [[]rank 1[]] test_launched.py::test_failure_reaches_every_rank (call) - *",
        "FAILED [[]rank 1[]] test_launched.py::test_only_rank_one_fails (call) - "
        "AssertionError: rank one disagrees*",
    ])

    # one order on every rank; pytest-randomly (when present) used rank 0's seed
    assert _order(log, 0) == _order(log, 1) and len(_order(log, 0)) == 6
    if importlib.util.find_spec("pytest_randomly") is not None:
        assert "Using --randomly-seed=" in out

    # each rank's device is LOCAL_RANK of its type, made current
    assert {"0 set_device 0", "1 set_device 1"} <= set(log.read_text().splitlines())

    reports = {r: json.loads((pytester.path / f"report-{r}.json").read_text()) for r in (0, 1)}
    for rank, report in reports.items():
        assert (report["rank"], report["world_size"], report["local_rank"]) == (rank, 2, rank)
        assert report["host"]
        assert report["selected_devices"] == ["cpu", f"acme:{rank}"]


def test_torchrun_ranks_that_collect_differently_fail_fast(pytester: pytest.Pytester,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_uneven="""
        import os

        def test_shared():
            pass

        if os.environ["RANK"] == "1":
            def test_extra():
                pass
    """)
    result = _torchrun(pytester, "-p", "no:randomly", "--devcaps-rank-timeout=60")
    err = result.stderr.str()
    assert result.ret != 0
    assert ("ERROR: pytest-devcaps: rank 0: the ranks collected different tests; every rank of a "
            "launched world must run the same tests in the same order:") in err, err
    assert "rank 1: only rank 1 has test_uneven.py::test_extra" in err
    assert "passed" not in result.stdout.str()  # nothing ran


def test_unknown_json_placeholder_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("--devcaps-json=report-{rnak}.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: *unknown placeholder {rnak} (did you mean 'rank'?)*"])


# -- a rank that times out or dies: every report written, rank 0 names it, the merge too ---------

STUCK_ON_ONE = """
import os, time

def test_stuck_on_rank_one():
    if os.environ["RANK"] == "1":
        time.sleep(300)
"""


def test_pytest_timeout_fires_on_a_quiet_rank(pytester: pytest.Pytester) -> None:
    """A 10 s pytest-timeout (thread method) on rank 1 fires in about 10 s, says Timeout, and
    rank 0's report names rank 1; the bound is generous (the launcher and two interpreters
    start on a loaded machine), far below the 300 s the test would otherwise sleep."""
    pytest.importorskip("pytest_timeout")
    pytester.makepyfile(test_stuck=STUCK_ON_ONE)
    started = time.monotonic()
    result = _torchrun(pytester, "-p", "no:randomly", "--timeout=10", "--timeout-method=thread",
                       "--devcaps-json=report.json")
    took = time.monotonic() - started
    out = result.stdout.str() + result.stderr.str()
    assert result.ret != 0, out
    assert took < 150, f"{took:.0f} s: the timeout did not fire"
    assert "+ Timeout +" in out and "time.sleep(300)" in out, out  # pytest-timeout's own dump
    assert "AssertionError" not in out
    zero = json.loads((pytester.path / "report.json").read_text())
    assert zero["peers"] == {"failed": [], "silent": [1]} and zero["exitstatus"] != 0
    assert not (pytester.path / "report-rank1.json").exists()  # rank 1 ended inside its test


KILLED_ON_ONE = """
import os, signal

def test_rank_one_dies():
    if os.environ["RANK"] == "1":
        os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_rank_fails_the_run_and_the_merge_names_it(
        pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]) -> None:
    pytester.makepyfile(test_killed=KILLED_ON_ONE)
    result = _torchrun(pytester, "-p", "no:randomly", "--devcaps-json=report.json")
    out = result.stdout.str() + result.stderr.str()
    assert result.ret != 0, out
    assert "rank 1 did not report its results" in out, out
    zero = json.loads((pytester.path / "report.json").read_text())
    assert zero["exitstatus"] != 0 and zero["peers"]["silent"] == [1]
    assert zero["summary"] == {"passed": 1}  # rank 0's own test passed; its run did not
    assert not (pytester.path / "report-rank1.json").exists()
    capsys.readouterr()
    assert main(["report", "merge", str(pytester.path / "report.json"), "-o", "-"]) == 1
    err = capsys.readouterr().err
    assert "no report from rank(s) 1" in err, err
    assert "rank 1 never reported its results (rank 0 says: it died or hung)" in err


STOPPED_WORLD = textwrap.dedent("""
    import os, subprocess, time

    def test_long():
        if os.environ["RANK"] == "1":  # a setsid grandchild on rank 1 must not outlive the run
            sleeper = subprocess.Popen(["sleep", "1000"], start_new_session=True)
            open(f"sleeper-{os.environ['RANK']}", "w").write(str(sleeper.pid))
        open(f"started-{os.environ['RANK']}", "w").write("")
        time.sleep(600)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the subreaper is Linux's")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
def test_a_stopped_or_killed_launcher_ends_every_rank_and_rank_0_reports(
        pytester: pytest.Pytester, sig: int) -> None:
    """Ctrl-C to torchrun (SIGINT to every rank), or torchrun SIGKILLed (nothing sent: the ranks
    watch their parent): every rank ends, rank 0 writes its report saying interrupted (exit 2),
    no rank prints a traceback, and what a test left running is killed with its rank."""
    pytester.makepyfile(test_stopped=STOPPED_WORLD)
    launcher = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:randomly",
         "--devcaps-json=report-{rank}.json"], cwd=pytester.path, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    ranks: list[int] = []
    sleeper = None
    try:
        deadline = time.monotonic() + 180
        while not all((pytester.path / f"started-{r}").exists() for r in (0, 1)):
            assert time.monotonic() < deadline and launcher.poll() is None, "the ranks never started"
            time.sleep(0.2)
        sleeper = int((pytester.path / "sleeper-1").read_text())
        ranks = [int(p) for p in Path(f"/proc/{launcher.pid}/task/{launcher.pid}/children")
                 .read_text().split()]
        launcher.send_signal(sig)
        output = launcher.communicate(timeout=120)[0].decode(errors="replace")
        assert [r for r in ranks if not gone_soon(r, seconds=60)] == []
        assert gone_soon(sleeper, seconds=10), "rank 1's setsid grandchild outlived the run"
        report = json.loads((pytester.path / "report-0.json").read_text())
        assert report["exitstatus"] == 2, output
        # the launcher's own SignalException traceback on Ctrl-C is torch's code, not a rank's
        assert output.count("Traceback") == output.count("elastic.multiprocessing.api."
                                                         "SignalException"), output
        expected = "the launcher is gone" if sig == signal.SIGKILL else "the launcher sent SIGINT"
        assert f"rank 0 stopped: {expected}" in output, output
        assert "within 300 s" not in output
    finally:
        for pid in [*ranks, *([sleeper] if sleeper else [])]:
            if process_exists(pid):
                with contextlib.suppress(ProcessLookupError):  # it may end between check and kill
                    os.kill(pid, signal.SIGKILL)
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()



def process_exists(pid: int) -> bool:
    """A live process (not a zombie waiting for its parent)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def gone_soon(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while process_exists(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True
