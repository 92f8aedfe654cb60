"""``torch.emu``'s allocator statistics, under ``torch.cuda``'s names.

The numbers are the emu allocator's (``csrc/emu_runtime.cpp``, a ``c10::DeviceAllocator``
registered for PrivateUse1, so ``torch.accelerator.memory`` reads the same ones when emu is the
accelerator). It does not cache: every allocation is a segment of its own, freed with its
storage, so reserved equals allocated, ``empty_cache`` has nothing to release, and a peak is the
most bytes that were live at once. Asked of the library directly, not of
``torch.accelerator.memory``, which serves another device type where torch has one.
"""

from __future__ import annotations

import ctypes
from collections import OrderedDict
from typing import Any

from pytest_devcaps.emu._native import checked_index, lib, out_of_range

_names: list[str] = []


def _stat_names() -> list[str]:
    if not _names:
        library = lib()
        _names.extend(library.devcaps_emu_memory_stat_name(i).decode("ascii")
                      for i in range(int(library.devcaps_emu_memory_stat_count())))
    return _names


def memory_stats(device: Any = None) -> OrderedDict[str, int]:
    """The statistics of ``device`` (default: the current one), as
    ``torch.accelerator.memory.memory_stats`` names them (``allocated_bytes.all.current``...)."""
    index = checked_index(device)
    names = _stat_names()
    values = (ctypes.c_longlong * len(names))()
    if lib().devcaps_emu_memory_stats(index, values, len(names)) != len(names):
        raise out_of_range(index)
    return OrderedDict(sorted(zip(names, (int(v) for v in values))))


def memory_allocated(device: Any = None) -> int:
    """Bytes held by live emu tensors' storages on ``device``."""
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device: Any = None) -> int:
    """The most bytes held at once since start or :func:`reset_peak_memory_stats`."""
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device: Any = None) -> int:
    """Bytes taken from the host for ``device`` (no cache: what is allocated)."""
    return memory_stats(device)["reserved_bytes.all.current"]


def max_memory_reserved(device: Any = None) -> int:
    return memory_stats(device)["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device: Any = None) -> None:
    index = checked_index(device)
    if lib().devcaps_emu_reset_peak_memory_stats(index) != 0:
        raise out_of_range(index)


def reset_accumulated_memory_stats(device: Any = None) -> None:
    index = checked_index(device)
    if lib().devcaps_emu_reset_accumulated_memory_stats(index) != 0:
        raise out_of_range(index)


def empty_cache() -> None:
    """Nothing is cached: nothing to release."""
    lib()


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """(free, total) bytes: total is the device's memory (``PYTEST_DEVCAPS_EMU_MEMORY``, by
    default half the host's RAM shared by the devices), free what it has left, never more than
    the host's ``MemAvailable`` (every emu device lives in host memory)."""
    index = checked_index(device)
    free, total = ctypes.c_ulonglong(), ctypes.c_ulonglong()
    if lib().devcaps_emu_memory_info(index, ctypes.byref(free), ctypes.byref(total)) != 0:
        raise out_of_range(index)
    return int(free.value), int(total.value)
