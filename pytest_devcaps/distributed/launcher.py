"""Ranks started by an outside launcher (torchrun): run the body in-process on every rank.

torchrun sets ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` and ``MASTER_ADDR``/``MASTER_PORT`` (read by
``pytest_devcaps.distributed.ranks``); each rank runs the whole pytest session, so ``distributed.run`` calls
the function directly and all-gathers the outcomes, giving every rank the same list (and the
same pass/fail). The pytest side of a launched session (rank-0 output, the collection check,
one pytest-randomly seed) is ``pytest_devcaps.parallel.torchrun``.
The process group is created on first use and destroyed at interpreter exit.
"""

from __future__ import annotations

import atexit
import pickle
import traceback
from datetime import timedelta
from typing import Any, Callable, Sequence

import torch

from pytest_devcaps import runtime
from pytest_devcaps.distributed.context import RankContext, rank_device
from pytest_devcaps.distributed.task import RankOutcome
from pytest_devcaps.distributed.ranks import LaunchInfo, launched_world

__all__ = ["LaunchInfo", "ensure_process_group", "launched_world", "run_on_launched_rank"]


def _destroy() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def _select_local_device(info: LaunchInfo, device: torch.device) -> torch.device:
    local = rank_device(device, info.local_rank, runtime.device_count(device.type))
    if local.type != "cpu":
        runtime.set_device(local)
    return local


def ensure_process_group(info: LaunchInfo, device: torch.device, backend: str,
                         pg_timeout_s: float) -> str | None:
    """Join the launcher's world once; returns a reason when it cannot serve this request."""
    import torch.distributed as dist

    if dist.is_initialized():
        current = str(dist.get_backend())  # "gloo", or "cpu:gloo,<type>:<backend>"
        if backend not in {part.split(":")[-1] for part in current.split(",")}:
            return f"the launched process group uses backend {current}, this test needs {backend}"
        return None
    _select_local_device(info, device)  # before init: device backends bind the current device
    dist.init_process_group(backend=backend, init_method="env://", rank=info.rank,
                            world_size=info.world_size, timeout=timedelta(seconds=pg_timeout_s))
    atexit.register(_destroy)
    return None


def run_on_launched_rank(fn: Callable[..., Any], args: Sequence[Any], *, info: LaunchInfo,
                         device: torch.device, backend: str) -> list[RankOutcome]:
    """Run ``fn(ctx, *args)`` on this rank and all-gather every rank's outcome."""
    import torch.distributed as dist

    local = _select_local_device(info, device)
    ctx = RankContext(rank=info.rank, world_size=info.world_size, local_rank=info.local_rank,
                      device=local, backend=backend, spawned=False)
    try:
        outcome = RankOutcome(rank=info.rank, status="ok", value=pickle.dumps(fn(ctx, *args)))
    except BaseException as exc:  # noqa: BLE001 - the other ranks must hear about it
        outcome = RankOutcome.from_exception(info.rank, exc)
    gathered: list[Any] = [None] * info.world_size
    try:
        dist.all_gather_object(gathered, outcome)
    except Exception:  # noqa: BLE001 - a peer died or the group broke: report what we know
        unknown = [RankOutcome(rank=r, status="error", summary="outcome unknown: gathering the "
                               "ranks' outcomes failed", message=traceback.format_exc())
                   for r in range(info.world_size) if r != info.rank]
        return sorted([outcome, *unknown], key=lambda o: o.rank)
    return list(gathered)
