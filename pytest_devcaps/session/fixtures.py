"""Device-generic fixtures: ``device``, ``device_type``, ``dtype``, ``devcaps``, ``devices``,
``tolerances``, ``dist_backend``, ``device_runtime``; ``devcaps_device`` / ``devcaps_dtype`` are
``device`` / ``dtype`` under names a project's own fixtures do not take (see ``parametrize``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from pytest_devcaps.marks.names import DEVICE_NAMES, DTYPE_NAMES, callspec_param
from pytest_devcaps.session.keys import session_state

if TYPE_CHECKING:
    import torch

    from pytest_devcaps.distributed.fixture_runner import DistributedRunner
    from pytest_devcaps.registry import DeviceCapabilities
    from pytest_devcaps.marks.tolerances import Tolerances


def item_device(item: pytest.Item) -> str:
    """The device key a test runs on: its ``device`` (or ``devcaps_device``) parameter when that
    names a device of the registry (ours, or a user's own parametrization), else its class's
    ``device_type`` (PyTorch's generated classes), else the session's primary device."""
    state = session_state(item.config)
    param = callspec_param(getattr(item, "callspec", None), DEVICE_NAMES)
    if param is not None:
        key = state.device_key(str(param))
        if key is not None:
            return key
    cls = getattr(item, "cls", None)
    if cls is not None:  # PyTorch's generated classes name their device type
        from pytest_devcaps.pytorch_compat import class_device_key

        key = class_device_key(cls, state.registry)
        if key is not None:
            return key
    return state.primary_device


def _device_key(request: pytest.FixtureRequest) -> str:
    param = getattr(request, "param", None)
    if param is None:
        param = callspec_param(getattr(request.node, "callspec", None), DEVICE_NAMES)
    return str(param) if param is not None else session_state(request.config).primary_device


@pytest.fixture
def device() -> torch.device:
    """The ``torch.device`` this test instance runs on; tests are instantiated once per selected
    device type (ids ``[cpu]``, ``[cuda]``...). Select with ``--devcaps-devices`` / ``--devcaps-except``.
    A project's own ``device`` fixture replaces this one (and is not parametrized by devcaps).
    Set up by the plugin's ``pytest_fixture_setup`` (``device_value``)."""
    raise AssertionError("pytest-devcaps: the device fixture is set up by the plugin's "
                         "pytest_fixture_setup (is pytest_devcaps.plugin registered?)")


@pytest.fixture
def devcaps_device() -> torch.device:
    """``device`` under a name no project fixture takes: parametrized per selected device even
    where the project defines its own ``device``."""
    raise AssertionError("pytest-devcaps: the devcaps_device fixture is set up by the plugin's "
                         "pytest_fixture_setup (is pytest_devcaps.plugin registered?)")


_DEVICES: dict[str, torch.device] = {}


def device_value(request: pytest.FixtureRequest) -> torch.device:
    """What the ``device`` / ``devcaps_device`` fixtures give ``request``: its parameter, else
    the primary device.

    The plugin's ``pytest_fixture_setup`` calls this instead of the fixture functions, so they
    need no ``request`` argument: pytest builds a fixture definition for ``request`` each time a
    fixture asks for it (three times per test), the largest part of what a parametrized
    ``device`` used to cost per test."""
    key = _device_key(request)
    if key not in _DEVICES:
        import torch

        _DEVICES[key] = torch.device(key)  # immutable: one object per key
    return _DEVICES[key]


def set_up_by_us(fixturedef: pytest.FixtureDef[Any]) -> bool:
    """Whether the plugin sets ``fixturedef`` up (our ``device`` / ``devcaps_device``), not pytest."""
    return fixturedef.argname in DEVICE_NAMES and is_device_fixture(fixturedef.func)


def is_device_fixture(function: object) -> bool:
    """Whether ``function`` is this module's ``device`` or ``devcaps_device`` fixture (not a
    project's own)."""
    return getattr(function, "__module__", None) == __name__ and \
        getattr(function, "__name__", None) in DEVICE_NAMES


@pytest.fixture
def devices(device: torch.device, request: pytest.FixtureRequest) -> list[torch.device]:
    """Every device of the test's device type, the test's own first (PyTorch's
    ``deviceCountAtLeast`` passes the same list); pair with ``requires_devices(n)``."""
    import torch

    identity = session_state(request.config).registry.identity(str(device))
    if identity.index is None:
        return [device]
    others = [torch.device(identity.type, index) for index in range(identity.count)
              if index != device.index]
    return [device, *others]


@pytest.fixture
def device_type(device: torch.device) -> str:
    """The test's device type as a string (``"cpu"``, ``"cuda"``, ``"xpu"``...)."""
    return device.type


def _dtype(request: pytest.FixtureRequest) -> torch.dtype:
    import torch

    param = getattr(request, "param", None)
    if param is None:
        param = callspec_param(getattr(request.node, "callspec", None), DTYPE_NAMES)
    return param if param is not None else torch.float32


@pytest.fixture
def dtype(request: pytest.FixtureRequest) -> torch.dtype:
    """The dtype under test, parametrized by ``@pytest.mark.dtypes(...)`` (float32 without it).
    A project's own ``dtype`` fixture replaces this one; ``devcaps_dtype`` is this one still."""
    return _dtype(request)


@pytest.fixture
def devcaps_dtype(request: pytest.FixtureRequest) -> torch.dtype:
    """``dtype`` under a name no project fixture takes."""
    return _dtype(request)


@pytest.fixture
def devcaps(request: pytest.FixtureRequest) -> DeviceCapabilities:
    """The capability registry seen from this test's device: ``devcaps.has("dtype.bf16")``,
    ``devcaps["attention.flash"]`` (a record with level, reason and source),
    ``devcaps.dispatch_key`` (``"CUDA"``...)."""
    state = session_state(request.config)
    return state.registry.view(item_device(request.node))


@pytest.fixture
def tolerances(request: pytest.FixtureRequest) -> Tolerances:
    """The test's ``tolerance`` marks seen from its device and dtype:
    ``tolerances.assert_close(actual, expected)``, ``tolerances.atol``, ``**tolerances.kwargs()``."""
    from pytest_devcaps.marks.conditions import known_facts
    from pytest_devcaps.marks.tolerances import Tolerances, parse_tolerance

    registry = session_state(request.config).registry
    facts = known_facts(registry)
    rules = [parse_tolerance(m.args, m.kwargs, facts) for m in request.node.iter_markers("tolerance")]
    dtype = callspec_param(getattr(request.node, "callspec", None), DTYPE_NAMES)
    return Tolerances(rules, registry.identity(item_device(request.node)), dtype)


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
            from pytest_devcaps.session.require import skip_unless_required

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


@pytest.fixture
def distributed(device: torch.device, dist_backend: str, devcaps: DeviceCapabilities,
                request: pytest.FixtureRequest) -> DistributedRunner:
    """Run a module-level function on N ranks of the test's device: ``distributed.run(fn, *args,
    world_size=2)`` returns each rank's return value. Skips when the device has no
    distributed backend (via ``dist_backend``) or too few devices for the world size;
    ``PYTEST_DEVCAPS_DIST_SHARE_DEVICES=1`` lets several ranks share one accelerator where the backend
    allows it. With pytest-timeout active, the rank watchdog fires before its timeout. Worlds
    are reused between calls (``PYTEST_DEVCAPS_DIST_REUSE=0`` starts a fresh one every time) and
    closed at the end of the session (``plugin.pytest_sessionfinish``)."""
    from pytest_devcaps.distributed.fixture import make_runner

    return make_runner(device, dist_backend, devcaps, request)
