"""PyTorch's device-generic test classes: their device, and our answers in the shape they expect.

``torch.testing._internal.common_device_type.instantiate_device_type_tests`` makes one class per
device type (``TestFooCPU``, ``TestFooCUDA``...) from a base carrying ``device_type``
(``CPUTestBase.device_type = "cpu"``). ``PrivateUse1TestBase.device_type`` is ``"privateuse1"``
until its ``setUpClass`` renames it to the backend's name; ``"privateuse1"`` is no valid device
string, so it is read as the name PrivateUse1 has in this process. Markers and decorators on
such classes are evaluated against that device type, not the session's main accelerator.

PyTorch's capability-based skips (PR #190846, upstream only) ask a test base's
``_capabilities()`` classmethod for ``{category: {name: zero-argument callable}}`` and skip a
``@requires_capabilities("dtype.fp8")`` test whose callable is false: :func:`capabilities_mapping`
and :class:`DevcapsCapabilities` answer that from the registry (``dtype.bf16`` is category
``dtype``, name ``bf16``). There, ``PrivateUse1TestBase`` declares nothing for an out-of-tree
backend (#194321), so every capability a test needs is undeclared, an ``AssertionError`` rather
than a skip: :func:`fill_privateuse1_capabilities` (the plugin calls it once PyTorch's test
helpers are imported) gives that base the registry's answers, unless someone declared any.
"""

from __future__ import annotations

import functools
import sys
from typing import TYPE_CHECKING, Any, Callable

from pytest_devcaps.backends.dispatch import torch_device_type
from pytest_devcaps.errors import UnknownDeviceError

if TYPE_CHECKING:
    from pytest_devcaps.registry import CapabilityRegistry

#: ``DeviceTypeTestBase.device_type`` before a base sets its own.
_GENERIC_PLACEHOLDER = "generic_device_type"

CapabilityMapping = dict[str, dict[str, Callable[[], bool]]]


def class_device_type(cls: Any) -> str | None:
    """The device type a test class is for (its ``device_type`` attribute), None without one."""
    value = getattr(cls, "device_type", None) if cls is not None else None
    if not isinstance(value, str) or not value or value == _GENERIC_PLACEHOLDER:
        return None
    return torch_device_type(value)


def class_device_key(cls: Any, registry: CapabilityRegistry) -> str | None:
    """The device a test class is for, as a key of ``registry`` (its ``device_type``'s device);
    the type itself where the registry has no such device (evaluated as a device without
    answers: a visible skip); None for a class without a ``device_type`` (or no class)."""
    kind = class_device_type(cls)
    if kind is None:
        return None
    try:
        return registry.identity(kind).key
    except UnknownDeviceError:
        return kind


def _has(registry: CapabilityRegistry, capability: str, device: str) -> bool:
    try:
        return registry.has(capability, device)
    except UnknownDeviceError:  # no answers for a device type absent here: not available
        return False


def capabilities_mapping(device_type: str, registry: CapabilityRegistry | None = None
                         ) -> CapabilityMapping:
    """``{category: {name: callable}}`` for ``device_type``, as a PyTorch test base's
    ``_capabilities()`` returns it, under our names and PyTorch's (the catalogue's aliases:
    ``dtype.fp8``); each callable asks the registry when called."""
    if registry is None:
        from pytest_devcaps.library import default_registry

        registry = default_registry()
    mapping: CapabilityMapping = {}
    for capability in [*registry.capability_names, *registry.catalogue.aliases()]:
        category, _, name = capability.partition(".")
        mapping.setdefault(category, {})[name] = functools.partial(_has, registry, capability,
                                                                   torch_device_type(device_type))
    return mapping


class DevcapsCapabilities:
    """Mix into a PyTorch-style test base: ``_capabilities()`` / ``get_capabilities()`` answer
    from the devcaps registry for the class's ``device_type``."""

    @classmethod
    def _capabilities(cls) -> CapabilityMapping:
        return capabilities_mapping(class_device_type(cls) or "cpu")

    @classmethod
    def get_capabilities(cls, category: str | None = None) -> Any:
        mapping = cls._capabilities()
        return mapping if category is None else mapping.get(category, {})


#: Where PyTorch's device test bases live (and, after PR #190846, ``requires_capabilities``).
COMMON_DEVICE_TYPE = "torch.testing._internal.common_device_type"
_FILLED = "_devcaps_capabilities"


def _registry_capabilities(cls: Any) -> CapabilityMapping:
    return capabilities_mapping(class_device_type(cls) or "privateuse1")


def fill_privateuse1_capabilities(module: Any = None) -> bool:
    """Answer ``PrivateUse1TestBase._capabilities()`` from the registry, where this torch has
    PyTorch's capability skips (``requires_capabilities`` in ``common_device_type``) and the base
    (or a vendor) declares no capability. True when it filled the slot now; torch 2.13 and 2.14
    have no such skips (devcaps' own ``requires_capabilities`` serves there): False."""
    module = module if module is not None else sys.modules.get(COMMON_DEVICE_TYPE)
    base = getattr(module, "PrivateUse1TestBase", None)
    if base is None or not hasattr(module, "requires_capabilities") or \
            getattr(base, _FILLED, False):
        return False
    declared = getattr(base, "_capabilities", None)
    try:
        if callable(declared) and declared():  # a vendor (or torch) declared capabilities
            return False
    except Exception:  # noqa: BLE001 - a base that cannot answer declares nothing
        pass
    base._capabilities = classmethod(_registry_capabilities)
    setattr(base, _FILLED, True)
    return True
