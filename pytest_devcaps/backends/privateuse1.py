"""An out-of-tree PrivateUse1 backend renamed by its extension (``torch.utils.rename_privateuse1_backend``)."""

from __future__ import annotations

import sys
from typing import Any, Mapping

from pytest_devcaps.backends.base import PLATFORM_FACT, torch_version
from pytest_devcaps.model import DeviceIdentity, Fact

_UNRENAMED = "privateuseone"


class PrivateUse1Adapter:
    """Whatever PrivateUse1 is called in this process, through ``torch.get_device_module``."""

    visible_devices_variable = None
    facts: Mapping[str, Fact] = {"platform": PLATFORM_FACT}

    @property
    def type(self) -> str:
        import torch

        return str(torch._C._get_privateuse1_backend_name())

    def __repr__(self) -> str:
        return f"<PrivateUse1Adapter type={self.type!r}>"

    def _module(self) -> Any | None:
        import torch

        if self.type == _UNRENAMED:
            return None
        try:
            return torch.get_device_module(self.type)
        except Exception:
            return None

    def is_available(self) -> bool:
        module = self._module()
        return bool(module is not None and module.is_available())

    def discover(self) -> list[DeviceIdentity]:
        module = self._module()
        if module is None:
            return []
        count = int(module.device_count())
        kind = self.type
        identities = []
        for index in range(count):
            name = kind
            if hasattr(module, "get_device_name"):
                try:
                    name = str(module.get_device_name(index))
                except Exception:
                    pass
            identities.append(DeviceIdentity(
                type=kind, index=index, vendor=kind, name=name, arch=kind, count=count,
                torch_version=torch_version(), facts={"arch": kind, "platform": sys.platform}))
        return identities
