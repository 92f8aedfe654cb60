"""The loaded emu library: its plain-C entry points (ctypes) and its Python module (c10d).

One library, opened twice by the loader (:mod:`pytest_devcaps.emu.autoload`): with ctypes for
the C functions ``torch.emu`` calls (device count and selection, streams, allocator statistics)
and as the Python extension module ``devcaps_emu`` for the ``EmuBackend`` class
(``csrc/emu_c10d.cpp``: c10d takes a ``c10d::Backend`` object, which only pybind11 can hand
over). The dynamic loader maps one file once, so both see the same devices and allocator.
"""

from __future__ import annotations

import ctypes
from typing import Any

from pytest_devcaps.errors import DeviceRuntimeError

_library: Any = None
_module: Any = None

#: (name, result type, argument types) of the C functions (csrc/emu.cpp, csrc/emu_runtime.cpp).
_SIGNATURES: tuple[tuple[str, Any, tuple[Any, ...]], ...] = (
    ("devcaps_emu_set_device_count", None, (ctypes.c_int,)),
    ("devcaps_emu_set_device_memory", None, (ctypes.c_ulonglong,)),
    ("devcaps_emu_device_count", ctypes.c_int, ()),
    ("devcaps_emu_current_device", ctypes.c_int, ()),
    ("devcaps_emu_set_device", ctypes.c_int, (ctypes.c_int,)),
    ("devcaps_emu_synchronize", ctypes.c_int, (ctypes.c_int,)),
    ("devcaps_emu_last_error", ctypes.c_char_p, ()),
    ("devcaps_emu_current_stream", ctypes.c_longlong, (ctypes.c_int,)),
    ("devcaps_emu_exchange_stream", ctypes.c_longlong, (ctypes.c_int, ctypes.c_longlong)),
    ("devcaps_emu_memory_stat_count", ctypes.c_int, ()),
    ("devcaps_emu_memory_stat_name", ctypes.c_char_p, (ctypes.c_int,)),
    ("devcaps_emu_memory_stats", ctypes.c_int,
     (ctypes.c_int, ctypes.POINTER(ctypes.c_longlong), ctypes.c_int)),
    ("devcaps_emu_reset_peak_memory_stats", ctypes.c_int, (ctypes.c_int,)),
    ("devcaps_emu_reset_accumulated_memory_stats", ctypes.c_int, (ctypes.c_int,)),
    ("devcaps_emu_memory_info", ctypes.c_int,
     (ctypes.c_int, ctypes.POINTER(ctypes.c_ulonglong), ctypes.POINTER(ctypes.c_ulonglong))),
)


def bind(library: Any, module: Any = None) -> None:
    """The loaded library (a ``ctypes.CDLL``) and its Python module, which torch.emu calls."""
    global _library, _module
    for name, result, arguments in _SIGNATURES:
        function = getattr(library, name)
        function.restype = result
        function.argtypes = list(arguments)
    _library, _module = library, module


def lib() -> Any:
    """The ctypes library; raises when the backend was never loaded."""
    if _library is None:
        raise DeviceRuntimeError("the emu backend is not loaded (set PYTEST_DEVCAPS_EMU_DEVICES)")
    return _library


def module() -> Any:
    """The ``devcaps_emu`` Python extension module (the ``EmuBackend`` class)."""
    if _module is None:
        raise DeviceRuntimeError("the emu backend's Python module is not loaded (set "
                                 "PYTEST_DEVCAPS_EMU_DEVICES)")
    return _module


def loaded() -> bool:
    return _library is not None


def index_of(device: Any) -> int:
    """The emu index ``device`` names (an int, ``"emu:1"``, a ``torch.device``); None and an
    index-less ``"emu"`` are the current device."""
    import torch

    from pytest_devcaps.emu import NAME
    from pytest_devcaps.errors import DevcapsValueError

    if device is None:
        return int(lib().devcaps_emu_current_device())
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != NAME:
        raise DevcapsValueError(f"expected an emu device, got {device}")
    return int(lib().devcaps_emu_current_device()) if device.index is None else int(device.index)


def checked_index(device: Any) -> int:
    """:func:`index_of`, refusing an index this process does not have."""
    index = index_of(device)
    if not 0 <= index < int(lib().devcaps_emu_device_count()):
        raise out_of_range(index)
    return index


def out_of_range(index: int) -> DeviceRuntimeError:
    """The error for an index the library refused (-1)."""
    count = int(lib().devcaps_emu_device_count())
    return DeviceRuntimeError(f"emu: device index {index} is out of range: this process has "
                              f"{count} emu device(s) (PYTEST_DEVCAPS_EMU_DEVICES / "
                              "EMU_VISIBLE_DEVICES)")
