"""pytest-devcaps: one ML test suite on any accelerator backend.

The pytest plugin itself is :mod:`pytest_devcaps.plugin` (entry point ``devcaps``). ``-p
pytest_devcaps`` names this package; the hook below then registers the plugin module once, under
the same name the entry point uses, so autoload on or off never registers it twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pytest_devcaps.version import __version__

if TYPE_CHECKING:
    from pytest_devcaps.model import CapabilityRecord, DeviceIdentity, Level, ProbeOutcome
    from pytest_devcaps.registry import CapabilityRegistry, DeviceCapabilities

__all__ = [
    "CapabilityRecord",
    "CapabilityRegistry",
    "DeviceCapabilities",
    "DeviceIdentity",
    "Level",
    "ProbeOutcome",
    "__version__",
]

PLUGIN_NAME = "devcaps"


def pytest_addhooks(pluginmanager: Any) -> None:
    """Runs only when this package is loaded with ``-p pytest_devcaps``."""
    if pluginmanager.is_blocked(PLUGIN_NAME) or pluginmanager.get_plugin(PLUGIN_NAME) is not None:
        return
    from pytest_devcaps import plugin

    if not pluginmanager.is_registered(plugin):
        pluginmanager.register(plugin, PLUGIN_NAME)


def __getattr__(name: str) -> Any:
    """The public names, imported on first use: the plugin is autoloaded into every session."""
    if name in ("CapabilityRecord", "DeviceIdentity", "Level", "ProbeOutcome"):
        from pytest_devcaps import model

        return getattr(model, name)
    if name in ("CapabilityRegistry", "DeviceCapabilities"):
        from pytest_devcaps import registry

        return getattr(registry, name)
    raise AttributeError(f"module 'pytest_devcaps' has no attribute {name!r}")
