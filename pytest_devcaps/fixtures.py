"""Device-generic fixtures: ``device``, ``device_type``, ``dtype``, ``devcaps``, ``dist_backend``,
``device_runtime``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from pytest_devcaps.errors import UnknownDeviceError
from pytest_devcaps.require import skip_unless_required
from pytest_devcaps.state import session_state

if TYPE_CHECKING:
    import torch

    from pytest_devcaps.registry import DeviceCapabilities


def item_device(item: pytest.Item) -> str:
    """The device key a test runs on: its ``device`` parameter when that names a device of the
    registry (ours, or a user's own parametrization), else the session's primary device."""
    state = session_state(item.config)
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "device" in callspec.params:
        try:
            return state.registry.identity(str(callspec.params["device"])).key
        except UnknownDeviceError:  # an empty parameter set, or a parameter not a device here
            pass
    return state.primary_device


@pytest.fixture
def device() -> torch.device:
    """The ``torch.device`` this test instance runs on; tests are instantiated once per selected
    device type (ids ``[cpu]``, ``[cuda]``...). Select with ``--devcaps-devices`` / ``--devcaps-except``."""
    raise AssertionError("pytest-devcaps: the device fixture is set up by the plugin's "
                         "pytest_fixture_setup (is pytest_devcaps.plugin registered?)")


_DEVICES: dict[str, torch.device] = {}


def device_value(request: pytest.FixtureRequest) -> torch.device:
    """What the ``device`` fixture gives ``request``: its parameter, else the primary device.

    The plugin's ``pytest_fixture_setup`` calls this instead of the fixture function, so the
    fixture needs no ``request`` argument: pytest builds a fixture definition for ``request``
    each time a fixture asks for it (three times per test), the largest part of what a
    parametrized ``device`` used to cost per test."""
    key = getattr(request, "param", None) or session_state(request.config).primary_device
    if isinstance(key, str) and key in _DEVICES:
        return _DEVICES[key]
    import torch

    device = torch.device(key)
    if isinstance(key, str):
        _DEVICES[key] = device  # immutable: one object per key
    return device


def is_device_fixture(function: object) -> bool:
    """Whether ``function`` is this module's ``device`` fixture (not a user's override)."""
    return getattr(function, "__module__", None) == __name__ and \
        getattr(function, "__name__", None) == "device"


@pytest.fixture
def device_type(device: torch.device) -> str:
    """The test's device type as a string (``"cpu"``, ``"cuda"``, ``"xpu"``...)."""
    return device.type


@pytest.fixture
def dtype(request: pytest.FixtureRequest) -> torch.dtype:
    """The dtype under test, parametrized by ``@pytest.mark.dtypes(...)`` (float32 without it)."""
    import torch

    return getattr(request, "param", None) or torch.float32


@pytest.fixture
def devcaps(request: pytest.FixtureRequest) -> DeviceCapabilities:
    """The capability registry seen from this test's device: ``devcaps.has("dtype.bf16")``,
    ``devcaps["attention.flash"]`` (a record with level, reason and source)."""
    state = session_state(request.config)
    return state.registry.view(item_device(request.node))


@pytest.fixture
def dist_backend(device: torch.device, request: pytest.FixtureRequest) -> str:
    """The default ``torch.distributed`` backend for the test's device; skips when it has none
    or the registry says that backend is missing."""
    import torch.distributed as dist

    from pytest_devcaps.runtime import default_dist_backend

    if not dist.is_available():
        pytest.skip("requires torch.distributed: this torch build has none")
    backend = default_dist_backend(device.type)
    if backend is None:
        pytest.skip(f"requires a distributed backend for {device}: torch.distributed registers "
                    f"no default backend for {device.type}")
    registry = session_state(request.config).registry
    capability = f"dist.{backend}"
    if capability in registry.catalogue:
        record = registry.record(capability, str(device))
        if not record.available:
            skip_unless_required(request.config, [capability],
                                 f"requires {capability} on {device}: {record.describe()}")
    return backend


class DeviceRuntime:
    """Device-neutral runtime calls bound to one device (instead of ``torch.cuda.*``)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def synchronize(self) -> None:
        from pytest_devcaps import runtime

        runtime.synchronize(self.device)

    def manual_seed(self, seed: int) -> None:
        from pytest_devcaps import runtime

        runtime.manual_seed(seed, self.device)

    def empty_cache(self) -> None:
        from pytest_devcaps import runtime

        runtime.empty_cache(self.device)

    def memory_stats(self) -> dict[str, Any]:
        from pytest_devcaps import runtime

        return runtime.memory_stats(self.device)

    def memory_allocated(self) -> int:
        from pytest_devcaps import runtime

        return runtime.memory_allocated(self.device)

    def max_memory_allocated(self) -> int:
        from pytest_devcaps import runtime

        return runtime.max_memory_allocated(self.device)

    def reset_peak_memory_stats(self) -> None:
        from pytest_devcaps import runtime

        runtime.reset_peak_memory_stats(self.device)


@pytest.fixture
def device_runtime(device: torch.device) -> DeviceRuntime:
    """Runtime helpers for the test's device: ``synchronize()``, ``manual_seed(n)``,
    ``empty_cache()``, ``memory_stats()``, ``memory_allocated()``, ``max_memory_allocated()``."""
    return DeviceRuntime(device)
