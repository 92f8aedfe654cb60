"""The backend adapter protocol and what every adapter shares."""

from __future__ import annotations

from typing import Mapping, Protocol, runtime_checkable

from pytest_devcaps.model import DeviceIdentity, Fact

#: The host OS, set by every builtin adapter.
PLATFORM_FACT = Fact("sys.platform of the host: linux, win32, darwin")
#: A fact an adapter may declare (emu's does): True when every process has devices of its own,
#: so the ranks of a world never contend for one and a world may have more ranks than devices
#: (the distributed fixture places rank r on device r mod count).
PRIVATE_DEVICES = "private_devices"
PRIVATE_DEVICES_FACT = Fact("True: each process has devices of its own (no two ranks contend "
                            "for one), so a distributed world may have more ranks than devices")


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
        """The environment variable that selects visible devices (``CUDA_VISIBLE_DEVICES``...),
        None where the type has none.

        ``--devcaps-pin-workers`` sets it per pytest-xdist worker (``pytest_devcaps.parallel.partition``):
        each worker, and the ranks it spawns, sees its own slice of the devices.
        """
        ...

    @property
    def facts(self) -> Mapping[str, Fact]:
        """The facts ``discover()`` may set in ``DeviceIdentity.facts``, by name, beyond the
        identity fields (``pytest_devcaps.model.IDENTITY_FACTS``). Rules, overrides and
        profiles may name only these: anything else is refused as a typo. Static data: it is
        read without a device (``pytest_devcaps.config.facts``)."""
        ...

    def is_available(self) -> bool: ...

    def discover(self) -> list[DeviceIdentity]: ...


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
    """Shared behaviour of the built-in adapters (a readable ``repr``)."""

    type: str = ""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} type={self.type!r}>"
