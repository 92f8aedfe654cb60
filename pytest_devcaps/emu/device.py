"""``torch.emu``: the device module torch finds for the emu type (``torch.get_device_module``).

The functions torch and pytest-devcaps look for on a device module (``torch.cuda``'s names):
device count and selection, ``synchronize``, seeding. Work on emu is synchronous, so
synchronize only checks the index. Random ops on emu run on the CPU's default generator (the
CPU fallback runs the CPU kernel), so seeding emu seeds that generator: ``torch.manual_seed``
calls :func:`manual_seed_all` here (``torch/random.py`` ``_seed_custom_device``), which sets
the seed it has already set. Autocast casts the matmul family (``csrc/emu_autocast.cpp``).
Absent on purpose: ``Stream``/``Event`` classes of its own, ``memory_stats``, RNG state.
"""

from __future__ import annotations

from typing import Any

from pytest_devcaps.errors import DevcapsValueError, DeviceRuntimeError

_library: Any = None


def bind(library: Any) -> None:
    """The loaded extension (a ``ctypes.CDLL``) these functions call."""
    global _library
    _library = library


def _lib() -> Any:
    if _library is None:
        raise DeviceRuntimeError("the emu backend is not loaded (set PYTEST_DEVCAPS_EMU_DEVICES)")
    return _library


def _index(device: Any) -> int:
    """The index of ``device`` (an int, ``"emu:1"``, a ``torch.device``); None is the current."""
    import torch

    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != "emu":
        raise DevcapsValueError(f"expected an emu device, got {device}")
    return current_device() if device.index is None else int(device.index)


def is_available() -> bool:
    return device_count() > 0


def device_count() -> int:
    return int(_lib().devcaps_emu_device_count())


def current_device() -> int:
    return int(_lib().devcaps_emu_current_device())


def set_device(device: Any) -> None:
    index = _index(device)
    if index < 0:
        return  # torch's convention: a negative index selects nothing
    if _lib().devcaps_emu_set_device(index) != 0:
        raise DeviceRuntimeError(f"emu: device index {index} is out of range: this process has "
                           f"{device_count()} emu device(s)")


class device:  # noqa: N801 - torch.cuda.device's name
    """Context manager that makes ``device`` current and restores the previous one."""

    def __init__(self, device: Any) -> None:
        self.index = -1 if device is None else _index(device)
        self.previous = -1

    def __enter__(self) -> None:
        self.previous = current_device()
        set_device(self.index)

    def __exit__(self, *exc: object) -> None:
        set_device(self.previous)


def synchronize(device: Any = None) -> None:
    """Every emu op has finished when it returns: only the index is checked."""
    index = _index(device)
    if not 0 <= index < device_count():
        raise DeviceRuntimeError(f"emu: device index {index} is out of range")


def get_device_name(device: Any = None) -> str:
    _index(device)
    return "devcaps emu (host memory, CPU kernels)"


def manual_seed(seed: int) -> None:
    """Seeds the CPU default generator, which emu's random ops use."""
    import torch

    torch.default_generator.manual_seed(int(seed))


manual_seed_all = manual_seed


def seed() -> None:
    import torch

    torch.default_generator.seed()


seed_all = seed


def initial_seed() -> int:
    import torch

    return int(torch.default_generator.initial_seed())


def get_amp_supported_dtype() -> list[Any]:
    """The dtypes ``torch.autocast("emu", dtype=...)`` accepts."""
    import torch

    return [torch.float16, torch.bfloat16]


def is_initialized() -> bool:
    return _library is not None


def init() -> None:
    _lib()


def _lazy_init() -> None:
    _lib()


def _is_in_bad_fork() -> bool:
    """Host memory survives fork: emu is never in a bad fork."""
    return False
