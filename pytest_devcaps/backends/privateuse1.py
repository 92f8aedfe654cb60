"""An out-of-tree PrivateUse1 backend renamed by its extension (``torch.utils.rename_privateuse1_backend``)."""

from __future__ import annotations

import sys
from typing import Any, Mapping

from pytest_devcaps.backends.base import PLATFORM_FACT, torch_version
from pytest_devcaps.errors import BackendInstallError
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
        """The renamed backend's device module; None while PrivateUse1 is not renamed. Renamed
        without a working module is a broken install: :class:`BackendInstallError`, naming the
        error, which discovery turns into a warning."""
        import torch

        kind = self.type
        if kind == _UNRENAMED:
            return None
        try:
            return torch.get_device_module(kind)
        except Exception as exc:
            raise BackendInstallError(f"PrivateUse1 is renamed {kind!r}, but "
                                      f"torch.get_device_module({kind!r}) raised "
                                      f"{type(exc).__name__}: {exc}") from None

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
