"""Entry point of one spawned rank: ``python -c ... _worker.main(<world dir>, <rank>)``.

Crash and hang diagnostics come first, before anything heavy is imported: faulthandler writes
to ``rank<r>.stacks`` on fatal signals and on SIGUSR1 from the parent, and ``rank<r>.ready``
tells the parent the handler is in place (a SIGUSR1 before that would kill the rank). Then
torch is imported once (``rank<r>.booted``: start-up is over) and the rank serves tasks: the parent writes a task directory's path
on the rank's stdin; per task the rank sends its output and stacks to that directory, joins a
fresh process group there, runs the function, writes its outcome, leaves the group, puts back
the process state a body may change, and writes the task's name to ``rank<r>.done`` in the
world's directory (ready for the next task). A failed task ends the rank
(its world is not reused); so do end of input and the parent's death. On Linux the rank runs
under a guardian (:mod:`pytest_devcaps._util.process_lifetime`) that kills it and everything it started
(``setsid`` descendants too) when pytest dies, SIGKILL included, or when the world stops it.
"""

from __future__ import annotations

import faulthandler
import os
import pickle
import signal
import sys
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import IO, Any

STACKS_FILE = "rank{rank}.stacks"
LOG_FILE = "rank{rank}.log"
OUTCOME_FILE = "rank{rank}.outcome"
READY_FILE = "rank{rank}.ready"
BOOTED_FILE = "rank{rank}.booted"
DONE_FILE = "rank{rank}.done"
STORE_FILE = "store"
ORPHAN_EXIT_CODE = 70


def _install_faulthandler(path: str) -> IO[str]:
    """Fatal-signal and SIGUSR1 stack dumps to ``path`` (kept open: faulthandler writes to its fd)."""
    stacks = open(path, "w")
    faulthandler.enable(stacks, all_threads=True)
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, stacks, all_threads=True)
    return stacks


@dataclass(frozen=True)
class _ProcessState:
    """What a body may change in its process and the next task must not inherit."""

    environ: dict[str, str]
    cwd: str
    default_dtype: Any
    default_device: Any
    deterministic: bool

    @classmethod
    def capture(cls) -> _ProcessState:
        import torch

        return cls(environ=dict(os.environ), cwd=os.getcwd(),
                   default_dtype=torch.get_default_dtype(),
                   default_device=torch.get_default_device(),
                   deterministic=torch.are_deterministic_algorithms_enabled())

    def restore(self) -> None:
        """As a fresh rank was; the CPU random generators get a new unpredictable seed, as a new
        interpreter's do (torch's initial seed is random), so no task replays another's draws."""
        import gc
        import random

        import torch

        if os.environ != self.environ:
            os.environ.clear()
            os.environ.update(self.environ)
        os.chdir(self.cwd)
        torch.set_default_dtype(self.default_dtype)
        torch.set_default_device(self.default_device)
        torch.set_grad_enabled(True)
        torch.use_deterministic_algorithms(self.deterministic)
        torch.seed()
        random.seed()
        dynamo = sys.modules.get("torch._dynamo")
        if dynamo is not None:
            dynamo.reset()  # compiled frames and guards of the last body
        gc.collect()


def _forget_other_module(target: str, file: str | None) -> None:
    """A module of the same name from another file (pytester runs reuse ``test_x``) is dropped,
    so the task's function is imported from its own file."""
    module = sys.modules.get(target.partition(":")[0])
    loaded = getattr(module, "__file__", None)
    if module is None or not file or not loaded:
        return
    try:
        same = os.path.samefile(loaded, file)
    except OSError:
        same = False
    if not same:
        del sys.modules[target.partition(":")[0]]


def _run(task: Any, rank: int, task_dir: str) -> Any:
    import torch
    import torch.distributed as dist

    from pytest_devcaps import runtime
    from pytest_devcaps.distributed.context import RankContext, rank_device
    from pytest_devcaps.distributed.task import RankOutcome

    device = rank_device(task.device, rank, runtime.device_count(torch.device(task.device).type))
    if device.type != "cpu":
        runtime.set_device(device)
    ctx = RankContext(rank=rank, world_size=task.world_size, local_rank=rank, device=device,
                      backend=task.backend)
    _forget_other_module(task.function.target, task.function.file)
    fn = task.function.resolve()
    args = pickle.loads(task.args)
    # No device_id: binding is backend-specific (gloo on an accelerator has none); the current
    # device set above is what device backends use.
    dist.init_process_group(
        backend=task.backend,
        init_method="file://" + os.path.join(task_dir, STORE_FILE),
        rank=rank,
        world_size=task.world_size,
        timeout=timedelta(seconds=task.pg_timeout_s),
    )
    dist.barrier()  # every rank is fully connected before any can finish and tear down
    value = fn(ctx, *args)
    try:
        payload = pickle.dumps(value)
    except Exception as exc:
        from pytest_devcaps.errors import DevcapsTypeError

        raise DevcapsTypeError(f"rank {rank}: the return value of {task.function} cannot be "
                               f"pickled back to the parent: {exc}") from exc
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


class _TaskOutput:
    """Points stdout, stderr and the stack dumps of this process at one task's directory."""

    def __init__(self, task_dir: str, rank: int) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        log = os.open(os.path.join(task_dir, LOG_FILE.format(rank=rank)),
                      os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        self.stacks = _install_faulthandler(os.path.join(task_dir, STACKS_FILE.format(rank=rank)))

    def close(self) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        self.stacks.flush()


def serve_task(task_dir: str, rank: int, state: _ProcessState, world_dir: str) -> bool:
    """Run the task in ``task_dir``; True when the rank may serve another."""
    from pytest_devcaps.distributed.task import TASK_FILE, RankOutcome
    from pytest_devcaps._util.files import write_atomic_bytes

    output = _TaskOutput(task_dir, rank)
    try:
        with open(os.path.join(task_dir, TASK_FILE), "rb") as f:
            task = pickle.load(f)
        sys.path[:] = list(task.sys_path)
        os.chdir(task.cwd)
        try:
            outcome = _run(task, rank, task_dir)
        except BaseException as exc:  # noqa: BLE001 - every failure must reach the parent
            outcome = RankOutcome.from_exception(rank, exc)
        # atomic: the parent never reads half of one
        write_atomic_bytes(Path(task_dir) / OUTCOME_FILE.format(rank=rank), pickle.dumps(outcome),
                           private=True)
        _leave_process_group(wait_for_peers=outcome.status != "error")
        if outcome.status == "error":
            return False
        state.restore()
        # the world's directory: the parent may remove the task's once every outcome is in
        write_atomic_bytes(Path(world_dir) / DONE_FILE.format(rank=rank),
                           os.path.basename(task_dir).encode(), private=True)
        return True
    finally:
        output.close()


def main(world_dir: str, rank: int, parent_pid: int) -> None:
    from pytest_devcaps._util.process_lifetime import enter

    # Linux: a guardian stays behind, this goes on as the rank and dies by SIGKILL with it
    # (even holding the GIL); a parent watch where the kernel cannot be asked
    enter(parent_pid, ORPHAN_EXIT_CODE)
    stacks = _install_faulthandler(os.path.join(world_dir, STACKS_FILE.format(rank=rank)))
    Path(world_dir, READY_FILE.format(rank=rank)).touch()  # SIGUSR1 now dumps instead of killing
    import torch  # noqa: F401 - once per rank, before the first task
    import torch.distributed  # noqa: F401

    state = _ProcessState.capture()
    Path(world_dir, BOOTED_FILE.format(rank=rank)).touch()  # the task's watchdog starts now
    for line in sys.stdin:  # end of input: the parent closed the world
        if not serve_task(line.strip(), rank, state, world_dir):
            sys.exit(1)
    stacks.close()
    sys.exit(0)
