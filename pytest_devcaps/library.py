"""The process-wide registry for library code (not tests): ``default_registry()``, ``device_has()``.

Inside a pytest session the plugin installs its session's registry here, so library code sees
the same answers, overrides included, as the tests. Outside one, the first call builds a
registry with default options and the vendor plugins of the ``devcaps`` entry-point group, as
the ``devcaps`` CLI does (probing once per device model; later processes read the probe cache).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Callable, Union

if TYPE_CHECKING:
    import torch

    from pytest_devcaps.registry import CapabilityRegistry

    #: A registry, or what builds one on first use (a pytest session's, which is built lazily).
    #: A name for the type checker only: every pytest session imports this module, and a
    #: ``Union`` of forward references is built when the module runs.
    RegistrySource = Union[CapabilityRegistry, Callable[[], CapabilityRegistry]]

_installed: list[RegistrySource] = []


@functools.lru_cache(maxsize=1)
def _built_default() -> CapabilityRegistry:
    from pytest_devcaps._util.environ import check_names
    from pytest_devcaps.hookspecs import vendor_hooks
    from pytest_devcaps.registry import build_registry
    from pytest_devcaps.runtime import import_torch

    check_names()  # a misspelt PYTEST_DEVCAPS_* variable is refused here as in pytest and the CLI
    import_torch()  # a backend that refused to load (emu): a ConfigError, not a crash later
    return build_registry(hook=vendor_hooks())


def install_default_registry(registry: RegistrySource) -> None:
    """Make ``registry`` what :func:`default_registry` returns until it is uninstalled; a
    callable is called when library code first asks (a session builds its registry on first need).

    Nested sessions (pytester) stack.
    """
    _installed.append(registry)


def uninstall_default_registry(registry: RegistrySource) -> None:
    if registry in _installed:
        _installed.remove(registry)


def default_registry() -> CapabilityRegistry:
    """The process-wide registry library code consults."""
    if not _installed:
        return _built_default()
    source = _installed[-1]
    return source() if callable(source) else source


def device_has(device: str | torch.device, capability: str, *, native: bool = False) -> bool:
    """Whether ``device`` has ``capability`` (``native=True`` refuses emulation).

    Raises :class:`~pytest_devcaps.errors.UnknownCapabilityError` for a misspelled capability
    and :class:`~pytest_devcaps.errors.UnknownDeviceError` for a device this machine lacks.
    """
    return default_registry().has(capability, device, native=native)
