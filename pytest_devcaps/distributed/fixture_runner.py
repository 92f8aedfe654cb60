"""``DistributedRunner``: the object behind the ``distributed`` fixture."""

from __future__ import annotations

from typing import Any, Callable, Mapping

import pytest
import torch

from pytest_devcaps import runtime
from pytest_devcaps.distributed import settings
from pytest_devcaps.distributed.harness import (
    AllRanksSkipped,
    DistributedRunError,
    WorldOptions,
    collect_results,
    spawn_world,
)
from pytest_devcaps.distributed.launcher import (
    LaunchInfo,
    ensure_process_group,
    launched_world,
    run_on_launched_rank,
)
from pytest_devcaps.distributed.task import FunctionRef


class DistributedRunner:
    """Runs a module-level function on N ranks of ``device`` with ``backend``.

    ``run(fn, *args, world_size=2)`` calls ``fn(ctx, *args)`` on every rank, ``ctx`` being a
    :class:`~pytest_devcaps.distributed.RankContext`, and returns the ranks' return values
    (picklable) in rank order. Outside a launcher each call spawns a fresh world; under
    torchrun the function runs in this process on each rank. Skips (too few devices, a
    launcher world of another size) are decided here, before any rank starts.

    ``launch`` is the outside launcher's world; None reads it from ``RANK``/``WORLD_SIZE``.
    ``share_devices`` allows more ranks than accelerators (rank r uses device r mod count).
    ``device_count`` is how many devices of the type there are (the fixture passes the
    capability registry's count, discovered without creating a device context); None asks torch.
    ``reuse_worlds`` keeps spawned worlds alive for the next call with the same world size and
    environment (None: ``PYTEST_DEVCAPS_DIST_REUSE``, default on); a world that failed is never reused.
    """

    def __init__(self, device: torch.device | str, backend: str, *,
                 timeout_s: float | None = None, pg_timeout_s: float | None = None,
                 share_devices: bool = False, launch: LaunchInfo | None = None,
                 device_count: int | None = None, reuse_worlds: bool | None = None) -> None:
        self.device = torch.device(device)
        self.backend = backend
        self.timeout_s = timeout_s
        self.pg_timeout_s = pg_timeout_s
        self.share_devices = share_devices
        self.launch = launch if launch is not None else launched_world()
        self._device_count = device_count
        self.reuse_worlds = reuse_worlds

    def device_count(self) -> int:
        """Devices of the test's type available to the world."""
        if self._device_count is not None:
            return self._device_count
        return runtime.device_count(self.device.type)

    def run(self, fn: Callable[..., Any], *args: Any, world_size: int = 2,
            timeout_s: float | None = None, env: Mapping[str, str] | None = None) -> list[Any]:
        """``fn(ctx, *args)`` on ``world_size`` ranks; the return values by rank."""
        __tracebackhide__ = True
        chosen_timeout = timeout_s if timeout_s is not None else self.timeout_s
        options = WorldOptions(timeout_s=chosen_timeout, pg_timeout_s=self.pg_timeout_s,
                               env=dict(env or {}), reuse=self.reuse_worlds)
        world_size = settings.world_size(world_size)
        if self.launch is not None:
            return self._run_launched(fn, args, world_size, options)
        self._skip_unless_enough_devices(world_size)
        try:
            return spawn_world(fn, args, world_size=world_size, device=self.device,
                               backend=self.backend, options=options)
        except AllRanksSkipped as skip:
            pytest.skip(skip.reason)

    def world_size_up_to(self, n: int) -> int:
        """``n`` capped by the devices available (cpu: ``n``; under a launcher: its world size)."""
        if self.launch is not None:
            return self.launch.world_size
        if self.device.type == "cpu" or self.share_devices:
            return n
        return max(1, min(n, self.device_count()))

    def _skip_unless_enough_devices(self, world_size: int) -> None:
        if self.device.type == "cpu" or self.share_devices:
            return
        count = self.device_count()
        if count < world_size:
            pytest.skip(
                f"world size {world_size} needs {world_size} {self.device.type} devices, "
                f"{count} visible (share_devices=True puts several ranks on one device where "
                f"backend {self.backend} allows it)")

    def _run_launched(self, fn: Callable[..., Any], args: tuple[Any, ...], world_size: int,
                      options: WorldOptions) -> list[Any]:
        __tracebackhide__ = True
        launch = self.launch
        assert launch is not None
        if launch.world_size != world_size:
            pytest.skip(f"needs world size {world_size}; the launcher started "
                        f"{launch.world_size} ranks")
        ref = FunctionRef.of(fn)
        reason = ensure_process_group(launch, self.device, self.backend,
                                      options.effective_pg_timeout())
        if reason:
            pytest.skip(reason)
        outcomes = run_on_launched_rank(fn, args, info=launch, device=self.device,
                                        backend=self.backend)
        failed = [o for o in outcomes if o.status == "error"]
        if failed:
            details = "\n".join([*(f"  rank {o.rank}: raised {o.summary}" for o in failed),
                                  *(f"----- rank {o.rank}: traceback -----\n{o.message.rstrip()}"
                                    for o in failed)])
            raise DistributedRunError(
                f"{ref} failed on ranks {[o.rank for o in failed]} of the launched world "
                f"(rank {launch.rank} of {launch.world_size}, device {self.device}, backend "
                f"{self.backend})\n{details}")
        try:
            return collect_results(ref, outcomes)
        except AllRanksSkipped as skip:
            pytest.skip(skip.reason)

