"""The harness API on cpu/gloo without pytester: results, environment, refusals, skips."""

from __future__ import annotations

import pickle

import pytest
import torch

from pytest_devcaps.distributed import (
    DistributedRunError,
    DistributedRunner,
    LaunchInfo,
    NotImportableError,
    launched_world,
    rank_device,
)
from pytest_devcaps.distributed.harness import WorldOptions, rank_environment
from pytest_devcaps.distributed.task import RankOutcome

import _dist_bodies as _bodies


@pytest.fixture
def runner() -> DistributedRunner:
    return DistributedRunner("cpu", "gloo", timeout_s=60, launch=None)


def test_results_come_back_in_rank_order_with_the_rank_environment(runner: DistributedRunner) -> None:
    results = runner.run(_bodies.describe, 10, world_size=3)
    assert [r["rank"] for r in results] == [0, 1, 2]
    for r in results:
        assert r["world_size"] == 3
        assert r["sum"] == 10 * 3 + 0 + 1 + 2
        assert r["device"] == "cpu" and r["backend"] == "gloo"
        assert r["omp"] == "1" and r["threads"] == 1
        assert r["master_addr"] == "127.0.0.1"


def _local_is_not_importable() -> None:
    pass


def test_local_function_is_refused_before_spawning(runner: DistributedRunner) -> None:
    def body(ctx: object) -> None:
        pass

    with pytest.raises(NotImportableError, match="local function or lambda; define it at module level"):
        runner.run(body)
    with pytest.raises(NotImportableError, match="lambda"):
        runner.run(lambda ctx: None)


def test_unpicklable_arguments_are_refused_before_spawning(runner: DistributedRunner) -> None:
    with pytest.raises(TypeError, match="arguments for .*describe cannot be pickled"):
        runner.run(_bodies.describe, lambda: 1)


def test_skip_in_every_rank_skips_the_test(runner: DistributedRunner) -> None:
    with pytest.raises(pytest.skip.Exception, match="no widget on this device"):
        runner.run(_bodies.skip_everywhere, world_size=2)


def test_skip_in_some_ranks_is_an_error(runner: DistributedRunner) -> None:
    with pytest.raises(DistributedRunError, match=r"ranks \[1\] skipped .* decide skips before"):
        runner.run(_bodies.skip_on_rank_one, world_size=2)


def test_unpicklable_result_names_the_rank_and_function(runner: DistributedRunner) -> None:
    with pytest.raises(DistributedRunError, match="return value of .*unpicklable_result cannot be pickled"):
        runner.run(_bodies.unpicklable_result, world_size=1)


def test_rank_device_uses_index_rank_mod_count() -> None:
    assert rank_device("cpu", 5, 1) == torch.device("cpu")
    assert rank_device("meta", 3, 2) == torch.device("meta", 1)
    assert rank_device(torch.device("meta", 0), 0, 4) == torch.device("meta", 0)
    with pytest.raises(RuntimeError, match="no meta device visible"):
        rank_device("meta", 0, 0)


def test_launcher_world_is_read_from_the_environment() -> None:
    assert launched_world({}) is None
    assert launched_world({"RANK": "3", "WORLD_SIZE": "4"}) == LaunchInfo(3, 4, 3)
    assert launched_world({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1"}) == LaunchInfo(3, 8, 1)


def test_world_size_up_to_follows_the_launcher_and_cpu() -> None:
    assert DistributedRunner("cpu", "gloo", launch=None).world_size_up_to(4) == 4
    assert DistributedRunner("cpu", "gloo", launch=LaunchInfo(0, 2, 0)).world_size_up_to(4) == 2


def test_launched_world_of_another_size_skips() -> None:
    runner = DistributedRunner("cpu", "gloo", launch=LaunchInfo(0, 2, 0))
    with pytest.raises(pytest.skip.Exception, match="needs world size 4; the launcher started 2"):
        runner.run(_bodies.describe, 0, world_size=4)


def test_rank_environment_drops_launcher_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "x")
    monkeypatch.setenv("MASTER_PORT", "1234")
    env = rank_environment(1, 2, torch.device("cpu"), {"EXTRA": "yes"})
    assert env["RANK"] == "1" and env["WORLD_SIZE"] == "2" and env["OMP_NUM_THREADS"] == "1"
    assert "TORCHELASTIC_RUN_ID" not in env and "MASTER_PORT" not in env
    assert env["EXTRA"] == "yes"


def test_process_group_timeout_stays_below_the_watchdog() -> None:
    assert WorldOptions(timeout_s=10).effective_pg_timeout() == 8
    assert WorldOptions(timeout_s=1000, pg_timeout_s=30).effective_pg_timeout() == 30
    pickle.dumps(WorldOptions())


def _raise(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:  # noqa: BLE001 - handed back to build an outcome later
        return caught


def test_rank_outcome_from_exception_skips_only_pytest_skips() -> None:
    skipped = RankOutcome.from_exception(2, _raise(pytest.skip.Exception("no widget")))
    assert (skipped.rank, skipped.status, skipped.message) == (2, "skipped", "no widget")
    failed = RankOutcome.from_exception(1, _raise(ValueError("boom\nsecond line")))
    assert (failed.rank, failed.status, failed.summary) == (1, "error", "ValueError: boom")
    # The traceback comes from the exception itself, even outside its except block.
    assert "in _raise" in failed.message and failed.message.rstrip().endswith("second line")
    assert RankOutcome.from_exception(0, _raise(KeyboardInterrupt())).summary == "KeyboardInterrupt"
