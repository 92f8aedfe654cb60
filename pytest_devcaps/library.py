"""The process-wide registry for library code (not tests): ``default_registry()``, ``device_has()``.

Inside a pytest session the plugin installs its session's registry here, so library code sees
the same answers, overrides included, as the tests. Outside one, the first call builds a
registry with default options (probing once per device model; later processes read the
probe cache).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from pytest_devcaps.registry import CapabilityRegistry

_installed: list[CapabilityRegistry] = []


@functools.lru_cache(maxsize=1)
def _built_default() -> CapabilityRegistry:
    from pytest_devcaps.registry import build_registry

    return build_registry()


def install_default_registry(registry: CapabilityRegistry) -> None:
    """Make ``registry`` what :func:`default_registry` returns until it is uninstalled.

    Nested sessions (pytester) stack.
    """
    _installed.append(registry)


def uninstall_default_registry(registry: CapabilityRegistry) -> None:
    if registry in _installed:
        _installed.remove(registry)


def default_registry() -> CapabilityRegistry:
    """The process-wide registry library code consults."""
    return _installed[-1] if _installed else _built_default()


def device_has(device: str | torch.device, capability: str, *, native: bool = False) -> bool:
    """Whether ``device`` has ``capability`` (``native=True`` refuses emulation).

    Raises :class:`~pytest_devcaps.errors.UnknownCapabilityError` for a misspelled capability
    and :class:`~pytest_devcaps.errors.UnknownDeviceError` for a device this machine lacks.
    """
    return default_registry().has(capability, device, native=native)
