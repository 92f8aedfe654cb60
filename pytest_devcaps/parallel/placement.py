"""Where this process stands in a session spread over processes, as ``session/startup``'s
:class:`~pytest_devcaps.session.startup.Placement`: the device a torchrun rank (its local rank)
or a pinned xdist worker owns, and how it gets the session's registry (an xdist worker
receives the controller's snapshot, or the one a sibling published)."""

from __future__ import annotations

import functools

import pytest

from pytest_devcaps.distributed.ranks import launched
from pytest_devcaps.parallel import xdist_handshake
from pytest_devcaps.session.startup import Placement


def placement(config: pytest.Config) -> Placement:
    obtain = functools.partial(xdist_handshake.session_registry, config)
    if launched():
        from pytest_devcaps.parallel import torchrun

        launch = torchrun.active(config)
        if launch is not None:
            return Placement(launch.local_rank, f"rank {launch.rank}", obtain)
    return Placement(xdist_handshake.pinned_index(config), "this xdist worker", obtain)
