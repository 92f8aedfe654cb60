"""Backend adapters: one per torch device type (the only place that may name torch.cuda)."""

from __future__ import annotations

import warnings
from typing import Iterable

from pytest_devcaps.backends.base import BackendAdapter
from pytest_devcaps.backends.cpu import CpuAdapter
from pytest_devcaps.backends.cuda import CudaAdapter
from pytest_devcaps.backends.hpu import HpuAdapter
from pytest_devcaps.backends.mps import MpsAdapter
from pytest_devcaps.backends.privateuse1 import PrivateUse1Adapter
from pytest_devcaps.backends.xpu import XpuAdapter
from pytest_devcaps.errors import DevcapsWarning
from pytest_devcaps.model import DeviceIdentity

__all__ = [
    "BackendAdapter", "CpuAdapter", "CudaAdapter", "HpuAdapter", "MpsAdapter",
    "PrivateUse1Adapter", "XpuAdapter", "builtin_backends", "discover_devices",
]


def builtin_backends() -> list[BackendAdapter]:
    """cpu, cuda, xpu, mps, hpu and the generic PrivateUse1 adapter, in that order."""
    return [CpuAdapter(), CudaAdapter(), XpuAdapter(), MpsAdapter(), HpuAdapter(),
            PrivateUse1Adapter()]


def discover_devices(adapters: Iterable[BackendAdapter]) -> list[DeviceIdentity]:
    """The cpu first, then every available adapter's devices.

    The generic PrivateUse1 adapter comes last: a vendor's own adapter for its renamed
    PrivateUse1 type (with its facts and visible-devices variable) claims those devices first.
    An adapter that raises is skipped with a warning: discovery never fails.
    """
    ordered = sorted(adapters, key=lambda adapter: (_safe_type(adapter) != "cpu",
                                                    isinstance(adapter, PrivateUse1Adapter)))
    devices: list[DeviceIdentity] = []
    seen: set[str] = set()
    for adapter in ordered:
        kind = _safe_type(adapter)
        try:
            if not adapter.is_available():
                continue
            found = adapter.discover()
        except Exception as exc:
            warnings.warn(f"pytest-devcaps: skipping the {kind or repr(adapter)} backend: "
                          f"{type(exc).__name__}: {exc}", DevcapsWarning, stacklevel=2)
            continue
        for identity in found:
            if identity.key not in seen:  # two adapters must not claim the same device
                seen.add(identity.key)
                devices.append(identity)
    return devices


def _safe_type(adapter: BackendAdapter) -> str:
    try:
        return str(adapter.type)
    except Exception:
        return ""
