"""What the ``distributed`` fixture (``session/fixtures.py``) makes: the runner of a test,
with its watchdog inside pytest-timeout's timeout. Imported when a test requests the fixture."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import pytest

from pytest_devcaps.backends.base import PRIVATE_DEVICES
from pytest_devcaps.distributed import settings

if TYPE_CHECKING:
    import torch

    from pytest_devcaps.distributed.fixture_runner import DistributedRunner
    from pytest_devcaps.registry import DeviceCapabilities

WATCHDOG_SHARE = 0.8
"""The rank watchdog's share of pytest-timeout's timeout: the ranks' stories (tracebacks,
stacks) arrive before pytest-timeout stops the test."""


def make_runner(device: torch.device, dist_backend: str, devcaps: DeviceCapabilities,
                request: pytest.FixtureRequest) -> DistributedRunner:
    """The ``distributed`` fixture's value (its docstring says what it does): a runner on the
    test's device, with the rank watchdog inside pytest-timeout's timeout."""
    from pytest_devcaps.distributed.fixture_runner import DistributedRunner

    limit = timeout_of(request.node)
    watchdog = None if limit is None else min(settings.watchdog_timeout(), WATCHDOG_SHARE * limit)
    share = settings.share_devices() or devcaps.identity.facts.get(PRIVATE_DEVICES) is True
    return DistributedRunner(device=device, backend=dist_backend, share_devices=share,
                             device_count=devcaps.identity.count, timeout_s=watchdog)


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
