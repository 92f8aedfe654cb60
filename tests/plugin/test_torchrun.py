"""pytest under torchrun: rank devices, rank-0 output, failures of every rank on rank 0, per-rank
JSON reports, one collection order (pytest-randomly too), and the rank watchdog under
pytest-timeout. The launched runs start ``torchrun --nproc-per-node 2`` on the CPU."""

from __future__ import annotations

import importlib.util
import json
import sys
import textwrap
from pathlib import Path

import pytest

from pytest_devcaps.errors import ConfigError
from pytest_devcaps.distributed.ranks import LaunchInfo, check_report_path, launched_world, report_path
from pytest_devcaps.parallel.torchrun import describe_difference

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
    rank1 = LaunchInfo(rank=1, world_size=2, local_rank=1)
    assert report_path("r-{rank}.json", rank1) == "r-1.json"
    assert report_path("r.json", rank1) is None  # ranks would overwrite rank 0's report
    assert report_path("r.json", LaunchInfo(0, 2, 0)) == "r.json"
    assert report_path("r.json", None) == "r.json"
    second_host = LaunchInfo(rank=2, world_size=4, local_rank=0)
    assert report_path("{host}.json", second_host) is not None  # the first rank of its host
    assert report_path("{host}.json", rank1) is None
    check_report_path("out/{host}-{rank}-{local_rank}-of-{world_size}.json")
    with pytest.raises(ConfigError, match=r"unknown placeholder \{rnak\}.*did you mean 'rank'"):
        check_report_path("r-{rnak}.json")


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
