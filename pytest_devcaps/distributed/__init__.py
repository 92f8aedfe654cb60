"""Multi-process harness: run a test body on N ranks of any device with its default backend.

Use the ``distributed`` fixture (``DistributedRunner``)::

    def _body(ctx: RankContext, n: int) -> float:   # module level: ranks import it by name
        ...

    def test_it(distributed):
        results = distributed.run(_body, 3, world_size=2)

Each rank is a fresh interpreter (never fork) joined through a FileStore in a private
directory; a rank that raises, crashes or hangs fails the test with every rank's traceback.
Worlds are kept for the session and reused by the next call with the same world size and rank
environment (each call gets a fresh process group); one that failed is closed, never reused;
``PYTEST_DEVCAPS_DIST_REUSE=0`` starts a fresh world for every call.
Under torchrun (``RANK``/``WORLD_SIZE`` set) the body runs in-process on each rank instead.
Timeouts: ``PYTEST_DEVCAPS_DIST_TIMEOUT`` (watchdog, default 240 s) and ``PYTEST_DEVCAPS_DIST_PG_TIMEOUT``
(process-group collectives, default 60 s, at most 80 % of the watchdog). On accelerators rank r
uses device ``r mod count``; a world larger than the device count skips unless
``PYTEST_DEVCAPS_DIST_SHARE_DEVICES=1`` (for backends that let ranks share a device).

The names below are imported on first use: a spawned rank imports ``_worker`` from this package
and must install its stack-dump handlers before anything imports torch, and the plugin's
``distributed`` fixture imports ``distributed.fixture`` only when a test requests it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_devcaps._util.lazy import lazy_names

if TYPE_CHECKING:
    from pytest_devcaps.distributed.context import RankContext, rank_device
    from pytest_devcaps.distributed.harness import (
        AllRanksSkipped,
        DistributedRunError,
        WorldMemoryWarning,
        WorldOptions,
        spawn_world,
    )
    from pytest_devcaps.distributed.launcher import LaunchInfo, launched_world
    from pytest_devcaps.distributed.pool import close_worlds
    from pytest_devcaps.distributed.fixture_runner import DistributedRunner
    from pytest_devcaps._util.qualnames import NotImportableError

_WHERE = {
    "AllRanksSkipped": ".harness",
    "DistributedRunError": ".harness",
    "DistributedRunner": ".fixture_runner",
    "LaunchInfo": ".launcher",
    "NotImportableError": "pytest_devcaps._util.qualnames",
    "RankContext": ".context",
    "WorldMemoryWarning": ".harness",
    "WorldOptions": ".harness",
    "close_worlds": ".pool",
    "launched_world": ".launcher",
    "rank_device": ".context",
    "spawn_world": ".harness",
}

__all__ = sorted(_WHERE)

__getattr__, __dir__ = lazy_names(__name__, _WHERE)
