"""Run a function on a world of rank processes and bring back every rank's result or story.

:func:`spawn_world` validates the request, takes a live world from the session's pool (or
starts one: ``world``), runs the task there and turns the outcome into values by rank,
:class:`DistributedRunError` (every rank's traceback, stacks and output) or
:class:`AllRanksSkipped`. Worlds are reused between calls unless ``PYTEST_DEVCAPS_DIST_REUSE=0`` or
``WorldOptions(reuse=False)``; a world whose task failed in any way is closed, never reused.
"""

from __future__ import annotations

import os
import pickle
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Mapping, Sequence

import torch

from pytest_devcaps.distributed import settings
from pytest_devcaps.errors import DevcapsError, DevcapsTypeError, DevcapsWarning
from pytest_devcaps.distributed.pool import session_pool
from pytest_devcaps.distributed.task import FunctionRef, RankOutcome, Task
from pytest_devcaps.distributed.world import World

_VOLATILE_VARIABLES = ("PYTEST_CURRENT_TEST",)
"""Left out of rank environments: pytest changes it for every test, and a world is reused only
by calls whose ranks would get the same environment."""
_LAUNCHER_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                       "TORCHELASTIC_RUN_ID", "MASTER_PORT")


class WorldMemoryWarning(DevcapsWarning):
    """A spawned world is likely to need more host memory than the machine has available."""


class DistributedRunError(DevcapsError, AssertionError):
    """One or more ranks raised, crashed or hung; the message holds every rank's story."""


class AllRanksSkipped(DevcapsError):
    """Every rank skipped with the same reason (callers turn this into pytest.skip)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class WorldOptions:
    """How to run a world: ``timeout_s`` is the watchdog (None: ``PYTEST_DEVCAPS_DIST_TIMEOUT``, default
    240 s), ``pg_timeout_s`` the process group's collective timeout (None:
    ``PYTEST_DEVCAPS_DIST_PG_TIMEOUT``, default 60 s), ``env`` adds to (and overrides) the per-rank
    environment, ``reuse`` takes the world from the session's pool and returns it there (None:
    ``PYTEST_DEVCAPS_DIST_REUSE``, default on), ``keep_run_dir`` leaves the world's directory behind
    (never pooled)."""

    timeout_s: float | None = None
    pg_timeout_s: float | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    reuse: bool | None = None
    keep_run_dir: bool = False

    def watchdog(self) -> float:
        """The watchdog timeout in seconds (validated: finite and > 0)."""
        if self.timeout_s is None:
            return settings.watchdog_timeout()
        return settings.seconds(self.timeout_s, "timeout_s")

    def effective_pg_timeout(self) -> float:
        # Shorter than the watchdog so a rank stuck in a collective raises (with its traceback)
        # before the parent has to kill it.
        requested = (settings.pg_timeout() if self.pg_timeout_s is None
                     else settings.seconds(self.pg_timeout_s, "pg_timeout_s"))
        return max(1.0, min(requested, self.watchdog() * 0.8))

    def reused(self) -> bool:
        if self.keep_run_dir:
            return False
        return settings.reuse_worlds() if self.reuse is None else self.reuse


def rank_environment(rank: int, world_size: int, device: torch.device,
                     extra: Mapping[str, str]) -> dict[str, str]:
    """The environment of one spawned rank."""
    env = {k: v for k, v in os.environ.items()
           if k not in _LAUNCHER_VARIABLES and k not in _VOLATILE_VARIABLES}
    env.update({
        "MASTER_ADDR": "127.0.0.1",
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_WORLD_SIZE": str(world_size),
        "PYTHONUNBUFFERED": "1",
    })
    if device.type == "cpu":
        # world_size ranks share the cores; OpenMP pools per rank would oversubscribe them.
        env["OMP_NUM_THREADS"] = "1"
    env.update(extra)
    return env


def spawn_world(fn: Callable[..., Any], args: Sequence[Any], *, world_size: int,
                device: torch.device | str, backend: str,
                options: WorldOptions | None = None) -> list[Any]:
    """Run ``fn(ctx, *args)`` on ``world_size`` rank processes; return the results by rank.

    ``fn`` must be a module-level function (the ranks import it by name). Raises
    :class:`DistributedRunError` when a rank fails, crashes or hangs, :class:`AllRanksSkipped`
    when every rank skipped, and ``ConfigError`` for a bad world size, timeout or variable.
    """
    __tracebackhide__ = True
    options = options or WorldOptions()
    device = torch.device(device)
    size = settings.world_size(world_size)
    timeout_s, reuse = options.watchdog(), options.reused()
    ref = FunctionRef.of(fn)
    try:
        payload = pickle.dumps(tuple(args))
    except Exception as exc:
        raise DevcapsTypeError(f"distributed.run: the arguments for {ref} cannot be pickled: {exc}") from exc
    task = Task(function=ref, args=payload, world_size=size, device=str(device),
                backend=backend, pg_timeout_s=options.effective_pg_timeout(),
                sys_path=tuple(sys.path), cwd=os.getcwd())
    environments = [rank_environment(rank, size, device, options.env) for rank in range(size)]
    key = _world_key(environments[0], size, device, backend)
    world = session_pool().take(key) if reuse else None
    if world is None:
        _warn_about_memory(size)
        world = World(environments, str(device), backend, keep_dir=options.keep_run_dir)
    usable = False
    try:
        result = world.run(task, timeout_s, f"distributed run of {ref} failed (world size {size}, "
                                            f"device {device}, backend {backend})")
        if result.failure is not None:
            raise DistributedRunError(result.failure)
        try:
            values = collect_results(ref, result.outcomes)
        except AllRanksSkipped:
            usable = True
            raise
        usable = True
        return values
    finally:
        if usable and reuse:
            session_pool().give_back(key, world)
        else:
            world.close()


def _world_key(env: Mapping[str, str], size: int, device: torch.device, backend: str) -> Hashable:
    return (size, str(device), backend, tuple(sorted(env.items())))


def _warn_about_memory(size: int) -> None:
    shortfall = settings.memory_shortfall(size, settings.available_host_memory())
    if shortfall:
        warnings.warn(WorldMemoryWarning(shortfall), stacklevel=4)


def collect_results(ref: FunctionRef, outcomes: Sequence[RankOutcome]) -> list[Any]:
    """Values by rank from all-successful outcomes; all-skipped raises AllRanksSkipped."""
    skipped = [o for o in outcomes if o.status == "skipped"]
    if skipped:
        reasons = sorted({o.message for o in skipped})
        if len(skipped) == len(outcomes) and len(reasons) == 1:
            raise AllRanksSkipped(reasons[0])
        raise DistributedRunError(
            f"{ref}: ranks {[o.rank for o in skipped]} skipped ({'; '.join(reasons)}) but others "
            "did not; decide skips before distributed.run so every rank agrees")
    return [pickle.loads(o.value) for o in outcomes]
