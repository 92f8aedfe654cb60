"""Backend adapters: one per torch device type (the only place that may name torch.cuda)."""

from __future__ import annotations

import sys
import warnings
from typing import Iterable, Sequence

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
    "PrivateUse1Adapter", "XpuAdapter", "builtin_backends", "describe_build", "discover_devices",
]

#: How headers name the build of torch's accelerator device types.
_BUILD_NAMES = {"cuda": "CUDA", "xpu": "XPU", "mps": "MPS", "hpu": "HPU", "mtia": "MTIA"}


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


def describe_build(devices: Sequence[DeviceIdentity]) -> str | None:
    """``torch 2.14.1+cu130: CUDA build, no device``: the torch in this process, the accelerator
    it was built for (``torch.accelerator.current_accelerator()``: compiled in, usable or not)
    and, where ``devices`` (what discovery found) has none of that type, that it has none: a
    CUDA build on a machine without a GPU is a CPU-only machine, and every answer is the CPU's.
    None before torch is imported (nothing was discovered)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    compiled = torch.accelerator.current_accelerator()
    if compiled is None:
        return f"torch {torch.__version__}: CPU build"
    kind = str(compiled.type)
    if kind == torch._C._get_privateuse1_backend_name():  # an out-of-tree backend, loaded
        built = f"{kind} backend (PrivateUse1)"
    else:
        built = ("ROCm" if kind == "cuda" and torch.version.hip else _BUILD_NAMES.get(kind, kind)) + " build"
    found = any(identity.type == kind for identity in devices)
    return f"torch {torch.__version__}: {built}" + ("" if found else ", no device")
