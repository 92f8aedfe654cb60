"""``devcaps probe``'s table (and ``devcaps check``'s first step): the registry built with the
vendor plugins of the ``devcaps`` entry-point group, printed as text or JSON. No pytest import."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from pytest_devcaps.report.table import registry_json, registry_lines, select_identities

if TYPE_CHECKING:
    from pytest_devcaps.registry import CapabilityRegistry, RegistryOptions


def show_registry(options: RegistryOptions, devices: Sequence[str] = (), *, as_json: bool = False,
                  verbose: bool = False) -> CapabilityRegistry:
    """Build the registry (with vendor plugins of the ``devcaps`` entry-point group), print it and
    return it: ``devcaps probe`` and the first step of ``devcaps check``. Raises
    ``DevcapsError`` on bad input."""
    from pytest_devcaps.hookspecs import vendor_hooks
    from pytest_devcaps.registry import build_registry

    registry = build_registry(options, hook=vendor_hooks())
    shown = select_identities(registry, devices)
    print(registry_json(registry, shown) if as_json else "\n".join(registry_lines(
        registry, shown, verbose=verbose)))
    return registry
