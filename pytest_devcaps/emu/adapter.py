"""The emu backend adapter: what a vendor writes to tell pytest-devcaps about its device type.

Registered by :mod:`pytest_devcaps.emu.vendor_hooks` through ``pytest_devcaps_register_backends``; it
is preferred over the generic PrivateUse1 adapter for the emu type, and gives the partitioner
the visible-devices variable (``--devcaps-pin-workers`` sets ``EMU_VISIBLE_DEVICES`` per worker).
"""

from __future__ import annotations

import sys
from typing import Mapping

from pytest_devcaps.backends.base import (
    PLATFORM_FACT,
    PRIVATE_DEVICES,
    PRIVATE_DEVICES_FACT,
    torch_version,
)
from pytest_devcaps.emu import NAME, VISIBLE_ENV
from pytest_devcaps.model import DeviceIdentity, Fact


class EmuAdapter:
    type = NAME
    visible_devices_variable = VISIBLE_ENV
    facts: Mapping[str, Fact] = {
        "platform": PLATFORM_FACT,
        PRIVATE_DEVICES: PRIVATE_DEVICES_FACT,  # emu's devices live in each process's memory
        "build": Fact("the emu library's build, its source digest (csrc/ and compiler flags): "
                      "part of the device's identity, so probe answers cached for another "
                      "build are not reused"),
    }

    def __repr__(self) -> str:
        return f"<EmuAdapter type={self.type!r}>"

    def is_available(self) -> bool:
        """True when torch's PrivateUse1 backend is emu (the autoload ran) with devices."""
        import torch

        if torch._C._get_privateuse1_backend_name() != NAME:
            return False
        return bool(torch.get_device_module(NAME).device_count() > 0)

    def discover(self) -> list[DeviceIdentity]:
        import torch

        from pytest_devcaps.emu.extension import source_digest

        build = source_digest()
        module = torch.get_device_module(NAME)
        count = int(module.device_count())
        return [DeviceIdentity(type=NAME, index=index, vendor=NAME,
                               name=str(module.get_device_name(index)), arch=NAME,
                               memory_bytes=int(module.mem_get_info(index)[1]), count=count,
                               torch_version=torch_version(), facts={"platform": sys.platform, "build": build,
                                      PRIVATE_DEVICES: True})
                for index in range(count)]
