"""Entry point of one spawned rank: ``python -c ... _worker.main(<run dir>, <rank>)``.

Crash and hang diagnostics come first (faulthandler to ``rank<r>.stacks``, dumped on fatal
signals and on SIGUSR1 from the parent), then the task is loaded, the process group joined,
the function run, its outcome written and the group destroyed, on every path.
"""

from __future__ import annotations

import faulthandler
import os
import pickle
import signal
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import IO

from pytest_devcaps.distributed.task import TASK_FILE, RankOutcome, Task
from pytest_devcaps.files import write_atomic_bytes

STACKS_FILE = "rank{rank}.stacks"
LOG_FILE = "rank{rank}.log"
OUTCOME_FILE = "rank{rank}.outcome"
STORE_FILE = "store"
ORPHAN_EXIT_CODE = 70


def _install_faulthandler(path: str) -> IO[str]:
    stacks = open(path, "w")  # kept open for the life of the process: faulthandler writes to its fd
    faulthandler.enable(stacks, all_threads=True)
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, stacks, all_threads=True)
    return stacks


def _exit_when_orphaned(parent_pid: int) -> None:
    """Leave no orphan: exit as soon as the parent (the pytest process) is gone."""

    def watch() -> None:
        while True:
            if os.getppid() != parent_pid:
                os._exit(ORPHAN_EXIT_CODE)
            time.sleep(0.5)

    threading.Thread(target=watch, name="devcaps-parent-watch", daemon=True).start()


def _run(task: Task, rank: int, run_dir: str) -> RankOutcome:
    import torch
    import torch.distributed as dist

    from pytest_devcaps import runtime
    from pytest_devcaps.distributed.context import RankContext, rank_device

    device = rank_device(task.device, rank, runtime.device_count(torch.device(task.device).type))
    if device.type != "cpu":
        runtime.set_device(device)
    ctx = RankContext(rank=rank, world_size=task.world_size, local_rank=rank, device=device,
                      backend=task.backend)
    fn = task.function.resolve()
    args = pickle.loads(task.args)
    # No device_id: binding is backend-specific (gloo on an accelerator has none); the current
    # device set above is what device backends use.
    dist.init_process_group(
        backend=task.backend,
        init_method="file://" + os.path.join(run_dir, STORE_FILE),
        rank=rank,
        world_size=task.world_size,
        timeout=timedelta(seconds=task.pg_timeout_s),
    )
    dist.barrier()  # every rank is fully connected before any can finish and tear down
    value = fn(ctx, *args)
    try:
        payload = pickle.dumps(value)
    except Exception as exc:
        raise TypeError(f"rank {rank}: the return value of {task.function} cannot be pickled "
                        f"back to the parent: {exc}") from exc
    return RankOutcome(rank=rank, status="ok", value=payload)


def _leave_process_group(wait_for_peers: bool) -> None:
    """Destroy the group; after success, first wait until no peer still needs this rank.

    A failed rank leaves at once: its peers are meant to fail in their next collective.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    if wait_for_peers:
        try:
            dist.barrier()
        except Exception:  # noqa: BLE001 - a peer failed; its own outcome tells why
            pass
    dist.destroy_process_group()


def main(run_dir: str, rank: int) -> None:
    stacks = _install_faulthandler(os.path.join(run_dir, STACKS_FILE.format(rank=rank)))
    with open(os.path.join(run_dir, TASK_FILE), "rb") as f:
        task: Task = pickle.load(f)
    _exit_when_orphaned(task.parent_pid)
    sys.path[:] = list(task.sys_path)
    outcome_path = Path(run_dir) / OUTCOME_FILE.format(rank=rank)
    try:
        outcome = _run(task, rank, run_dir)
    except BaseException as exc:  # noqa: BLE001 - every failure must reach the parent
        outcome = RankOutcome.from_exception(rank, exc)
    write_atomic_bytes(outcome_path, pickle.dumps(outcome))  # the parent never reads half of one
    try:
        _leave_process_group(wait_for_peers=outcome.status != "error")
    finally:
        stacks.flush()
    sys.exit(0 if outcome.status != "error" else 1)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
