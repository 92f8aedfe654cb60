"""``torch.emu``: the device module torch finds for the emu type (``torch.get_device_module``).

The functions torch, FSDP2 and pytest-devcaps look for on a device module (``torch.cuda``'s
names): device count and selection, ``synchronize`` (which waits for outstanding
collectives), seeding, streams and events
(:mod:`pytest_devcaps.emu.streams`: ``Stream``, ``Event``, ``current_stream``, ``stream``...,
what FSDP2 asks of its device handle), allocator statistics (:mod:`pytest_devcaps.emu.memory`:
``memory_allocated``, ``memory_stats``...). Work on emu is synchronous but for collectives,
which run on gloo's threads: synchronize waits for those. Random ops on emu run on the CPU's default generator (the CPU fallback runs
the CPU kernel), so seeding emu seeds that generator: ``torch.manual_seed`` calls
:func:`manual_seed_all` here (``torch/random.py`` ``_seed_custom_device``), which sets the seed
it has already set; its RNG state (``get_rng_state``...) is a 16-byte (seed, offset) pair naming a
position of that generator, the layout DTensor's random ops need (:mod:`pytest_devcaps.emu.rng`).
Autocast casts
the matmul family (``csrc/emu_autocast.cpp``). Absent on purpose: graphs, pinned memory.
"""

from __future__ import annotations

from typing import Any

from pytest_devcaps.emu import _native, rng
from pytest_devcaps.emu._native import checked_index, index_of, lib, out_of_range
from pytest_devcaps.errors import DevcapsValueError, DeviceRuntimeError
from pytest_devcaps.emu.memory import (
    empty_cache,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_stats,
    reset_accumulated_memory_stats,
    reset_peak_memory_stats,
)
from pytest_devcaps.emu.streams import (
    Event,
    Stream,
    StreamContext,
    current_stream,
    default_stream,
    set_stream,
    stream,
)

__all__ = [
    "Event", "Stream", "StreamContext", "bind", "current_device", "current_stream",
    "default_stream", "device", "device_count", "empty_cache", "get_amp_supported_dtype",
    "get_device_name", "get_rng_state", "get_rng_state_all", "init", "initial_seed", "is_available", "is_initialized",
    "manual_seed", "manual_seed_all", "max_memory_allocated", "max_memory_reserved",
    "mem_get_info", "memory_allocated", "memory_reserved", "memory_stats",
    "reset_accumulated_memory_stats", "reset_peak_memory_stats", "seed", "seed_all",
    "set_device", "set_rng_state", "set_rng_state_all", "set_stream", "stream", "synchronize",
]


def bind(library: Any, module: Any = None) -> None:
    """The loaded extension (a ``ctypes.CDLL``) and its Python module these functions call."""
    _native.bind(library, module)


def is_available() -> bool:
    return device_count() > 0


def device_count() -> int:
    return int(lib().devcaps_emu_device_count())


def current_device() -> int:
    return int(lib().devcaps_emu_current_device())


def set_device(device: Any) -> None:
    index = index_of(device)
    if index < 0:
        return  # torch's convention: a negative index selects nothing
    if lib().devcaps_emu_set_device(index) != 0:
        raise out_of_range(index)


class device:  # noqa: N801 - torch.cuda.device's name
    """Context manager that makes ``device`` current and restores the previous one."""

    def __init__(self, device: Any) -> None:
        self.index = -1 if device is None else index_of(device)
        self.previous = -1

    def __enter__(self) -> None:
        self.previous = current_device()
        set_device(self.index)

    def __exit__(self, *exc: object) -> None:
        set_device(self.previous)


def synchronize(device: Any = None) -> None:
    """Wait for the collectives still running on ``device`` (every other emu op has finished
    when it returns); raises what a failed one raised."""
    index = checked_index(device)
    status = int(lib().devcaps_emu_synchronize(index))
    if status == -1:
        raise out_of_range(index)
    if status != 0:
        message = lib().devcaps_emu_last_error().decode("utf-8", "replace")
        raise DeviceRuntimeError(f"emu: a collective on emu:{index} failed: {message}")


def get_device_name(device: Any = None) -> str:
    index_of(device)
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


def get_rng_state(device: Any = "emu") -> Any:
    """A 16-byte (seed, offset) state, the layout DTensor reads (:mod:`pytest_devcaps.emu.rng`);
    every emu device shares it, as they share the CPU generator their random ops draw from."""
    checked_index(device)
    return rng.get_state()


def set_rng_state(new_state: Any, device: Any = "emu") -> None:
    checked_index(device)
    rng.set_state(new_state)


def get_rng_state_all() -> list[Any]:
    return [get_rng_state(index) for index in range(device_count())]


def set_rng_state_all(new_states: Any) -> None:
    """Every emu device has the one CPU generator: the states must agree."""
    import torch

    states = list(new_states)
    if any(not torch.equal(state, states[0]) for state in states[1:]):
        raise DevcapsValueError("emu devices share the CPU's default generator: "
                                "set_rng_state_all needs one state for all of them")
    if states:
        set_rng_state(states[0])


def get_amp_supported_dtype() -> list[Any]:
    """The dtypes ``torch.autocast("emu", dtype=...)`` accepts."""
    import torch

    return [torch.float16, torch.bfloat16]


def is_initialized() -> bool:
    return _native.loaded()


def init() -> None:
    lib()


def _lazy_init() -> None:
    lib()


def _is_in_bad_fork() -> bool:
    """Host memory survives fork: emu is never in a bad fork."""
    return False
