"""The backend adapter protocol and what every adapter shares."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from pytest_devcaps.model import DeviceIdentity


@runtime_checkable
class BackendAdapter(Protocol):
    """Knows one torch device type: whether it is usable here and what its devices are.

    ``is_available()`` must be cheap and must not create device contexts; ``discover()``
    is called only when it returned True.
    """

    @property
    def type(self) -> str:
        """The torch device type: ``cpu``, ``cuda``, ``xpu``..."""
        ...

    @property
    def visible_devices_variable(self) -> str | None:
        """The environment variable that selects visible devices (``CUDA_VISIBLE_DEVICES``...)."""
        ...

    def is_available(self) -> bool: ...

    def discover(self) -> list[DeviceIdentity]: ...

    def default_dist_backend(self) -> str | None: ...


def default_dist_backend_for(device_type: str) -> str | None:
    """``torch.distributed``'s default backend for the device type, None when it has none."""
    try:
        import torch.distributed as dist

        return dist.get_default_backend_for_device(device_type)
    except Exception:
        return None


def torch_version() -> str:
    import torch

    return str(torch.__version__)


def total_ram_bytes() -> int | None:
    """Physical memory of this machine (None where ``os.sysconf`` cannot tell)."""
    import os

    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


class TorchDeviceAdapter:
    """Shared behaviour of the adapters: ``default_dist_backend`` from torch's own table."""

    type: str = ""

    def default_dist_backend(self) -> str | None:
        return default_dist_backend_for(self.type)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} type={self.type!r}>"
