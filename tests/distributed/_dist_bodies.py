"""Rank bodies for the harness tests (module level: the ranks import them by name)."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist

from pytest_devcaps.distributed import RankContext


def describe(ctx: RankContext, offset: int) -> dict[str, object]:
    value = torch.tensor([float(ctx.rank + offset)])
    dist.all_reduce(value)
    return {
        "rank": ctx.rank,
        "world_size": dist.get_world_size(),
        "sum": value.item(),
        "device": str(ctx.device),
        "backend": dist.get_backend(),
        "omp": os.environ.get("OMP_NUM_THREADS"),
        "master_addr": os.environ.get("MASTER_ADDR"),
        "threads": torch.get_num_threads(),
    }


def skip_everywhere(ctx: RankContext) -> None:
    pytest.skip("no widget on this device")


def skip_on_rank_one(ctx: RankContext) -> None:
    if ctx.rank == 1:
        pytest.skip("rank 1 has no widget")


def unpicklable_result(ctx: RankContext) -> object:
    return lambda: None


def pid(ctx: RankContext) -> int:
    return os.getpid()


def dirty_the_process(ctx: RankContext) -> int:
    """Changes what the next task on this rank must not see."""
    os.environ["DEVCAPS_TEST_LEFTOVER"] = "1"
    torch.manual_seed(0)
    torch.set_default_dtype(torch.float64)
    torch.set_grad_enabled(False)
    os.chdir("/")
    return os.getpid()


def process_state(ctx: RankContext) -> dict[str, object]:
    return {"pid": os.getpid(), "leftover": os.environ.get("DEVCAPS_TEST_LEFTOVER"),
            "dtype": str(torch.get_default_dtype()), "grad": torch.is_grad_enabled(),
            "cwd": os.getcwd(), "seed": torch.initial_seed()}


def fail_on_rank_one(ctx: RankContext) -> int:
    if ctx.rank == 1:
        raise RuntimeError("rank one fails")
    return os.getpid()


def escapes_then_holds_the_gil(ctx: RankContext) -> None:
    """Starts ``sleep 1000`` in its group and in a session of its own, notes its pid and theirs,
    then blocks in C code holding the GIL (no Python thread or handler can run in this rank)."""
    import ctypes
    import subprocess

    stay = subprocess.Popen(["sleep", "1000"])
    escape = subprocess.Popen(["sleep", "1000"], start_new_session=True)
    folder = os.environ["DEVCAPS_TEST_PIDS"]
    for pid in (os.getpid(), stay.pid, escape.pid):
        open(os.path.join(folder, f"{ctx.rank}-{pid}"), "w").close()
    ctypes.PyDLL(None).sleep(1000)  # PyDLL keeps the GIL held during the call
