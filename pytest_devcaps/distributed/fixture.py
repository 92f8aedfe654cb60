"""The ``distributed`` pytest fixture (registered as a plugin module by pytest_devcaps.plugin).

Importing it imports no torch: the plugin registers it in every session.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

import pytest

from pytest_devcaps.distributed import settings

if TYPE_CHECKING:
    import torch

    from pytest_devcaps.distributed.fixture_runner import DistributedRunner
    from pytest_devcaps.registry import DeviceCapabilities

WATCHDOG_SHARE = 0.8
"""The rank watchdog's share of pytest-timeout's timeout: the ranks' stories (tracebacks,
stacks) arrive before pytest-timeout stops the test."""


@pytest.fixture
def distributed(device: torch.device, dist_backend: str, devcaps: DeviceCapabilities,
                request: pytest.FixtureRequest) -> DistributedRunner:
    """Run a module-level function on N ranks of the test's device: ``distributed.run(fn, *args,
    world_size=2)`` returns each rank's return value. Skips when the device has no
    distributed backend (via ``dist_backend``) or too few devices for the world size;
    ``PYTEST_DEVCAPS_DIST_SHARE_DEVICES=1`` lets several ranks share one accelerator where the backend
    allows it. With pytest-timeout active, the rank watchdog fires before its timeout. Worlds
    are reused between calls (``PYTEST_DEVCAPS_DIST_REUSE=0`` starts a fresh one every time) and
    closed at the end of the session."""
    from pytest_devcaps.distributed.fixture_runner import DistributedRunner

    limit = timeout_of(request.node)
    watchdog = None if limit is None else min(settings.watchdog_timeout(), WATCHDOG_SHARE * limit)
    return DistributedRunner(device=device, backend=dist_backend,
                             share_devices=settings.share_devices(),
                             device_count=devcaps.identity.count, timeout_s=watchdog)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The session's worlds end with it (their ranks would otherwise wait until exit). No
    world was started unless the pool was imported: a session without one imports nothing."""
    pool = sys.modules.get("pytest_devcaps.distributed.pool")
    if pool is not None:
        pool.close_worlds()


def timeout_of(item: pytest.Item) -> float | None:
    """pytest-timeout's timeout for ``item``, as that plugin resolves it: the ``timeout`` marker,
    else ``--timeout``, ``PYTEST_TIMEOUT``, the ``timeout`` ini key (pytest-timeout 2.4
    ``_get_item_settings`` / ``get_env_settings``); None when the plugin is not active or the
    timeout is 0 (off)."""
    config = item.config
    if not config.pluginmanager.hasplugin("timeout"):
        return None
    marker = item.get_closest_marker("timeout")
    value: Any = None
    if marker is not None:
        value = marker.args[0] if marker.args else marker.kwargs.get("timeout")
    if value is None:
        value = config.getoption("timeout", None)
    if value is None:
        value = os.environ.get("PYTEST_TIMEOUT") or config.getini("timeout") or None
    try:
        seconds = float(value) if value is not None else 0.0
    except (TypeError, ValueError):
        return None  # pytest-timeout reports a bad value itself
    return seconds if seconds > 0 else None
