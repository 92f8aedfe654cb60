"""The capability registry: one answer per (capability, device), with level, reason and source.

- :mod:`~pytest_devcaps.registry.inputs`: what shapes a registry (overrides, settings, profile).
- :mod:`~pytest_devcaps.registry.registrars`: what the vendor hooks fill in.
- :mod:`~pytest_devcaps.registry.probing`: probe outcomes per device, through the cache.
- :mod:`~pytest_devcaps.registry.layers`: precedence as an ordered list of layers, merged.
- :mod:`~pytest_devcaps.registry.build`: :func:`build_registry` puts those together.
- :mod:`~pytest_devcaps.registry.query`: :class:`CapabilityRegistry`, views and snapshots.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_devcaps._util.lazy import lazy_names

if TYPE_CHECKING:
    from pytest_devcaps.registry.build import (
        build_registry,
        catalogue_with_hooks,
        discover,
        registry_from_snapshot,
    )
    from pytest_devcaps.registry.layers import merge_answer
    from pytest_devcaps.registry.inputs import CapabilitySetting, RegistryOptions
    from pytest_devcaps.registry.query import CapabilityRegistry, DeviceCapabilities
    from pytest_devcaps.registry.registrars import BackendRegistrar, CapabilityRegistrar

_WHERE = {
    "build_registry": ".build", "catalogue_with_hooks": ".build", "discover": ".build",
    "registry_from_snapshot": ".build",
    "merge_answer": ".layers",
    "CapabilitySetting": ".inputs", "RegistryOptions": ".inputs",
    "CapabilityRegistry": ".query", "DeviceCapabilities": ".query",
    "BackendRegistrar": ".registrars", "CapabilityRegistrar": ".registrars",
}

# Names are imported on first use: the pytest plugin imports the option types in every session,
# and only a session that uses devcaps needs the rest.
__getattr__, __dir__ = lazy_names(__name__, _WHERE)


__all__ = [
    "BackendRegistrar",
    "CapabilityRegistrar",
    "CapabilityRegistry",
    "CapabilitySetting",
    "DeviceCapabilities",
    "RegistryOptions",
    "build_registry",
    "catalogue_with_hooks",
    "discover",
    "merge_answer",
    "registry_from_snapshot",
]
