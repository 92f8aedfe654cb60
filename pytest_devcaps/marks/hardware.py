"""The hardware-class vocabulary: ``generic`` | ``accelerator`` | ``<device type or vendor>``.

After PyTorch's ``HardwareClassification`` (upstream ``common_utils``, PR #186918: GENERIC,
ACCELERATOR, CPU, CUDA, MPS, XPU; not in torch 2.13). ``devcaps lint`` suggests classes in the
same words. Which class a test has is :mod:`pytest_devcaps.marks.classification`'s job.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pytest_devcaps.errors import MarkerError, did_you_mean
from pytest_devcaps.marks.names import ACCELERATOR_CLASS, GENERIC_CLASS, HARDWARE_ATTRIBUTE

if TYPE_CHECKING:
    from pytest_devcaps.registry import CapabilityRegistry

GENERIC = GENERIC_CLASS
ACCELERATOR = ACCELERATOR_CLASS
MARKER = "hardware"
#: The class attribute PyTorch's device-generic test classes declare a class with.
ATTRIBUTE = HARDWARE_ATTRIBUTE


def normalise(value: Any) -> str:
    """``HardwareClassification.ACCELERATOR`` / ``"ACCELERATOR"`` -> ``"accelerator"``."""
    name = getattr(value, "name", value)
    return str(name).strip().lower()


def vocabulary(registry: CapabilityRegistry | None = None) -> tuple[str, ...]:
    """Every valid class: generic, accelerator, device types and vendors (the registry's too)."""
    from pytest_devcaps.marks.conditions import device_names, static_device_names  # the catalogue's

    names = device_names(registry) if registry is not None else static_device_names()
    return (GENERIC, ACCELERATOR, *[n for n in names if n not in (GENERIC, ACCELERATOR)])


def check_class(value: Any, registry_of: Any = None, *, marker: str = MARKER) -> str:
    """``value`` normalised, or :class:`MarkerError` naming the closest class.

    ``registry_of`` (a zero-argument callable) is asked for the registry only when ``value``
    is none of the static names, so a registry is built only for an out-of-tree backend's name.
    """
    name = normalise(value)
    if name in vocabulary():
        return name
    known = vocabulary(registry_of() if registry_of is not None else None)
    if name not in known:
        raise MarkerError(marker, f"unknown hardware class {value!r}{did_you_mean(name, known)}; "
                                  f"expected {GENERIC}, {ACCELERATOR}, or a device type or vendor "
                                  f"({', '.join(known[2:])})")
    return name
