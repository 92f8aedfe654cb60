"""Multi-process harness: run a test body on N ranks of any device with its default backend.

Use the ``distributed`` fixture (``DistributedRunner``)::

    def _body(ctx: RankContext, n: int) -> float:   # module level: ranks import it by name
        ...

    def test_it(distributed):
        results = distributed.run(_body, 3, world_size=2)

Each rank is a fresh interpreter (never fork) joined through a FileStore in a private
directory; a rank that raises, crashes or hangs fails the test with every rank's traceback.
Under torchrun (``RANK``/``WORLD_SIZE`` set) the body runs in-process on each rank instead.
Timeouts: ``DEVCAPS_DIST_TIMEOUT`` (watchdog, default 240 s) and ``DEVCAPS_DIST_PG_TIMEOUT``
(process-group collectives, default 60 s, at most 80 % of the watchdog). On accelerators rank r
uses device ``r mod count``; a world larger than the device count skips unless
``DEVCAPS_DIST_SHARE_DEVICES=1`` (for backends that let ranks share a device).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_devcaps.distributed.context import RankContext, rank_device
    from pytest_devcaps.distributed.harness import (
        AllRanksSkipped,
        DistributedRunError,
        WorldOptions,
        spawn_world,
    )
    from pytest_devcaps.distributed.launcher import LaunchInfo, launched_world
    from pytest_devcaps.distributed.runner import DistributedRunner
    from pytest_devcaps.qualnames import NotImportableError

_WHERE = {
    "RankContext": "context", "rank_device": "context",
    "AllRanksSkipped": "harness", "DistributedRunError": "harness", "WorldOptions": "harness",
    "spawn_world": "harness",
    "LaunchInfo": "launcher", "launched_world": "launcher",
    "DistributedRunner": "runner",
}


def __getattr__(name: str) -> Any:
    """Names are imported on first use: the plugin registers ``distributed.fixture`` in every
    session, and that must not import torch (PEP 562 module ``__getattr__``)."""
    if name == "NotImportableError":
        from pytest_devcaps.qualnames import NotImportableError

        return NotImportableError
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)


__all__ = [
    "AllRanksSkipped",
    "DistributedRunError",
    "DistributedRunner",
    "LaunchInfo",
    "NotImportableError",
    "RankContext",
    "WorldOptions",
    "launched_world",
    "rank_device",
    "spawn_world",
]
