"""The ``distributed`` pytest fixture (registered as a plugin module by pytest_devcaps.plugin)."""

from __future__ import annotations

import os

import pytest
import torch

from pytest_devcaps.distributed.runner import DistributedRunner
from pytest_devcaps.registry import DeviceCapabilities


@pytest.fixture
def distributed(device: torch.device, dist_backend: str, devcaps: DeviceCapabilities) -> DistributedRunner:
    """Run a module-level function on N ranks of the test's device: ``distributed.run(fn, *args,
    world_size=2)`` returns each rank's return value. Skips when the device has no
    distributed backend (via ``dist_backend``) or too few devices for the world size;
    ``DEVCAPS_DIST_SHARE_DEVICES=1`` lets several ranks share one accelerator where the backend
    allows it."""
    share = os.environ.get("DEVCAPS_DIST_SHARE_DEVICES", "") not in ("", "0")
    return DistributedRunner(device=device, backend=dist_backend, share_devices=share,
                             device_count=devcaps.identity.count)
