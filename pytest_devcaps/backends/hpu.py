"""Habana Gaudi: torch's ``hpu`` device type, provided by ``habana_frameworks`` when installed."""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from typing import Any, Mapping

from pytest_devcaps.backends.base import PLATFORM_FACT, TorchDeviceAdapter, torch_version
from pytest_devcaps.errors import BackendInstallError
from pytest_devcaps.model import DeviceIdentity, Fact


def gaudi_arch(name: str) -> tuple[str, int | None]:
    """(arch, gaudi_generation) from ``"GAUDI3"`` / ``"HL-325L"`` style names."""
    lowered = name.lower()
    generation: int | None
    match = re.search(r"gaudi\s*(\d)", lowered)
    if match:
        generation = int(match.group(1))
    elif "gaudi" in lowered:
        generation = 1
    else:
        hl = re.search(r"hl-?(\d)", lowered)  # HL-2xx Gaudi2, HL-3xx Gaudi3
        generation = int(hl.group(1)) if hl and hl.group(1) in "23" else None
    return (f"gaudi{generation}" if generation else "gaudi-unknown"), generation


def _hpu_module() -> Any | None:
    """``torch.hpu``, importing habana_frameworks lazily; None when it is not installed.

    Installed but failing to import is a broken install, not an absent device: it raises
    :class:`BackendInstallError` naming the error, which discovery turns into a warning.
    """
    if importlib.util.find_spec("habana_frameworks") is None:
        return None
    try:
        importlib.import_module("habana_frameworks.torch")
        import torch
    except Exception as exc:
        raise BackendInstallError(f"habana_frameworks is installed, but importing "
                                  f"habana_frameworks.torch raised {type(exc).__name__}: "
                                  f"{exc}") from None
    return getattr(torch, "hpu", None)


class HpuAdapter(TorchDeviceAdapter):
    type = "hpu"
    visible_devices_variable = "HABANA_VISIBLE_MODULES"
    facts: Mapping[str, Fact] = {
        "gaudi_generation": Fact("Gaudi generation: 1, 2, 3 (None when the name does not say)"),
        "platform": PLATFORM_FACT,
    }

    def is_available(self) -> bool:
        module = _hpu_module()
        return bool(module is not None and module.is_available())

    def discover(self) -> list[DeviceIdentity]:
        module = _hpu_module()
        if module is None:
            return []
        count = module.device_count()
        identities = []
        for index in range(count):
            name = str(module.get_device_name(index)) if hasattr(module, "get_device_name") \
                else "Gaudi"
            arch, generation = gaudi_arch(name)
            props = _properties(module, index)
            identities.append(DeviceIdentity(
                type="hpu", index=index, vendor="habana", name=name, arch=arch,
                memory_bytes=getattr(props, "total_memory", None), count=count,
                torch_version=torch_version(),
                facts={"arch": arch, "gaudi_generation": generation, "platform": sys.platform}))
        return identities


def _properties(module: Any, index: int) -> Any:
    try:
        return module.get_device_properties(index)
    except Exception:
        return None
