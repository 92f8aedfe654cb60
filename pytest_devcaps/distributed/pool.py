"""Worlds kept alive between ``distributed.run`` calls, so ranks import torch once per session.

A world is reused only by a call that would have spawned an identical one: same world size,
device, backend and rank environment (a test that changes the environment gets its own). A
world goes back to the pool only after a task that succeeded on every rank (or that every rank
skipped) and whose ranks all left the process group; anything else closes it, so a failing body
never poisons the next. Idle worlds beyond :data:`MAX_IDLE_RANKS` ranks are closed, least recently
used first; :func:`close_worlds` (session end, interpreter exit) closes the rest.
"""

from __future__ import annotations

import atexit
from collections import OrderedDict
from typing import Hashable

from pytest_devcaps.distributed.world import World, close_all_worlds

MAX_IDLE_RANKS = 8
"""Idle ranks kept per process (the FSDP suite's worlds of 2 and 4 ranks fit, with room for one
more small world); each idle rank holds an interpreter with torch imported."""


class WorldPool:
    """Idle worlds by key."""

    def __init__(self, max_idle_ranks: int = MAX_IDLE_RANKS) -> None:
        self.max_idle_ranks = max_idle_ranks
        self._idle: OrderedDict[Hashable, World] = OrderedDict()

    def take(self, key: Hashable) -> World | None:
        """The idle world for ``key``, now the caller's; None when there is none, or it died or
        did not finish its last task in time (then it is closed)."""
        world = self._idle.pop(key, None)
        if world is not None and not world.settle():
            world.close()
            return None
        return world

    def give_back(self, key: Hashable, world: World) -> None:
        """Keep ``world`` for the next call with ``key`` when it can serve one; else close it."""
        if not (world.reusable and world.alive) or world.size > self.max_idle_ranks:
            world.close()
            return
        previous = self._idle.pop(key, None)
        if previous is not None:
            previous.close()
        self._idle[key] = world
        while sum(w.size for w in self._idle.values()) > self.max_idle_ranks:
            _, oldest = self._idle.popitem(last=False)
            oldest.close()

    def __len__(self) -> int:
        return len(self._idle)

    def close(self) -> None:
        while self._idle:
            _, world = self._idle.popitem(last=False)
            world.close()


_POOL = WorldPool()


def session_pool() -> WorldPool:
    """The pool of this process."""
    return _POOL


def close_worlds() -> None:
    """Close every world of this process: the pool's idle ones and any still running."""
    _POOL.close()
    close_all_worlds()


atexit.register(close_worlds)
