"""Intel GPUs: torch's ``xpu`` device type."""

from __future__ import annotations

import re
import sys
from typing import Any, Mapping

from pytest_devcaps.backends.base import PLATFORM_FACT, TorchDeviceAdapter, torch_version
from pytest_devcaps.model import DeviceIdentity, Fact

# Best effort from marketing names: (pattern, arch, Xe generation). First match wins.
_NAME_ARCH = (
    (r"data center gpu max|\bmax 1[0-9]{3}\b|ponte vecchio", "pvc", 1),
    (r"\bb[0-9]{3}\b|battlemage", "bmg", 2),
    (r"\b1[34]0v\b|lunar lake", "lnl", 2),
    (r"\ba[0-9]{3}m?\b|alchemist|flex", "acm", 1),
    (r"meteor lake|arc\(tm\) graphics|\barc graphics\b", "mtl", 1),
)


def intel_arch(name: str) -> tuple[str, int | None]:
    """(arch, xe_generation) from a device name, ``("unknown", None)`` when no rule fits."""
    lowered = name.lower()
    for pattern, arch, generation in _NAME_ARCH:
        if re.search(pattern, lowered):
            return arch, generation
    return "unknown", None


class XpuAdapter(TorchDeviceAdapter):
    type = "xpu"
    visible_devices_variable = "ZE_AFFINITY_MASK"
    facts: Mapping[str, Fact] = {
        "xe_generation": Fact("Intel Xe generation from the device name: 1, 2"),
        "has_fp64": Fact("whether the device has fp64 arithmetic (device properties)"),
        "platform": PLATFORM_FACT,
    }

    def is_available(self) -> bool:
        import torch

        module = getattr(torch, "xpu", None)
        return bool(module is not None and module.is_available())

    def discover(self) -> list[DeviceIdentity]:
        import torch

        count = torch.xpu.device_count()
        return [self._identity(index, count, torch.xpu.get_device_properties(index))
                for index in range(count)]

    def _identity(self, index: int, count: int, props: Any) -> DeviceIdentity:
        name = str(getattr(props, "name", "Intel GPU"))
        arch, generation = intel_arch(name)
        driver = getattr(props, "driver_version", None)
        return DeviceIdentity(
            type="xpu", index=index, vendor="intel", name=name, arch=arch,
            memory_bytes=getattr(props, "total_memory", None), count=count,
            torch_version=torch_version(), runtime_version=_xpu_runtime(),
            driver_version=None if driver is None else str(driver),
            facts={"arch": arch, "xe_generation": generation,
                   "has_fp64": bool(getattr(props, "has_fp64", False)),
                   "platform": sys.platform})


def _xpu_runtime() -> str | None:
    import torch

    return getattr(torch.version, "xpu", None)
