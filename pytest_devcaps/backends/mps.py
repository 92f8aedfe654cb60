"""Apple silicon GPUs: torch's ``mps`` device type (one device, unified memory)."""

from __future__ import annotations

import platform
import re
import subprocess
import sys
from typing import Mapping

from pytest_devcaps.backends.base import (
    PLATFORM_FACT,
    TorchDeviceAdapter,
    torch_version,
    total_ram_bytes,
)
from pytest_devcaps.model import DeviceIdentity, Fact


def apple_chip(brand: str) -> tuple[str, int | None]:
    """(arch, chip_generation) from ``"Apple M3 Pro"`` -> ``("apple-m3", 3)``."""
    match = re.search(r"\bM(\d+)\b", brand)
    if not match:
        return "apple-unknown", None
    generation = int(match.group(1))
    return f"apple-m{generation}", generation


def _chip_brand() -> str:
    try:
        return subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True,
                              text=True, timeout=5, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return platform.processor() or "Apple GPU"


class MpsAdapter(TorchDeviceAdapter):
    type = "mps"
    visible_devices_variable = None
    facts: Mapping[str, Fact] = {
        "chip_generation": Fact("Apple M-series generation: 1 for M1, 3 for M3"),
        "macos_version": Fact("platform.mac_ver(): 14.4", version=True),
        "max_allocation_bytes": Fact("largest single allocation (None: torch does not say)"),
        "platform": PLATFORM_FACT,
    }

    def is_available(self) -> bool:
        import torch

        return sys.platform == "darwin" and torch.backends.mps.is_available()

    def discover(self) -> list[DeviceIdentity]:
        brand = _chip_brand()
        arch, generation = apple_chip(brand)
        return [DeviceIdentity(
            type="mps", index=0, vendor="apple", name=brand, arch=arch,
            memory_bytes=total_ram_bytes(), count=1, torch_version=torch_version(),
            facts={"arch": arch, "chip_generation": generation,
                   "macos_version": platform.mac_ver()[0], "platform": sys.platform,
                   # Metal caps one buffer (maxBufferLength) below unified memory, and torch does
                   # not expose the cap: requires_memory(per_allocation=) skips as unknown.
                   "max_allocation_bytes": None})]
