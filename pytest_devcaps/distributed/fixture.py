"""The ``distributed`` pytest fixture (registered as a plugin module by pytest_devcaps.plugin)."""

from __future__ import annotations

import pytest
import torch

from pytest_devcaps.distributed import settings
from pytest_devcaps.distributed.pool import close_worlds
from pytest_devcaps.distributed.runner import DistributedRunner
from pytest_devcaps.registry import DeviceCapabilities


@pytest.fixture
def distributed(device: torch.device, dist_backend: str, devcaps: DeviceCapabilities) -> DistributedRunner:
    """Run a module-level function on N ranks of the test's device: ``distributed.run(fn, *args,
    world_size=2)`` returns each rank's return value. Skips when the device has no
    distributed backend (via ``dist_backend``) or too few devices for the world size;
    ``DEVCAPS_DIST_SHARE_DEVICES=1`` lets several ranks share one accelerator where the backend
    allows it. Worlds are reused between calls (``DEVCAPS_DIST_REUSE=0`` starts a fresh one
    every time) and closed at the end of the session."""
    return DistributedRunner(device=device, backend=dist_backend,
                             share_devices=settings.share_devices(),
                             device_count=devcaps.identity.count)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The session's worlds end with it (their ranks would otherwise wait until exit)."""
    close_worlds()
