"""``torch.emu``'s streams and events: what FSDP2 asks of a device handle (``Stream(priority=)``,
``Event()``, ``current_stream()``, ``stream(s)``), as ``torch.cuda`` names them.

The streams and events themselves are the C++ device guard's (``csrc/emu_runtime.cpp``): emu is
a synchronous device, so a stream is an id and an event the host clock at record time; every
``torch.Stream`` / ``torch.Event`` call on an emu device reaches that guard. The classes here
are ``torch.Stream`` / ``torch.Event`` made on an emu device, so ``torch.accelerator``,
``torch.Stream`` methods (``wait_stream``, ``record_event``) and these agree. The current stream
is asked of the library directly, not of ``torch.accelerator``, which serves another device
type when torch was built for one (CUDA) and a GPU is present.
"""

from __future__ import annotations

from typing import Any

import torch

from pytest_devcaps.emu import NAME
from pytest_devcaps.emu._native import checked_index, lib, out_of_range
from pytest_devcaps.errors import DevcapsValueError

#: ``c10::DeviceType::PrivateUse1`` (c10/core/DeviceType.h; part of torch's serialized formats,
#: so stable): the device type code ``torch.Stream(stream_id=, device_index=, device_type=)`` takes.
PRIVATEUSE1_CODE = 20
#: Stream id 0 is every device's default stream (the guard's numbering).
DEFAULT_STREAM_ID = 0


class Stream(torch.Stream):
    """An emu stream (``torch.emu.Stream(device=None, priority=0)``): a new ``torch.Stream``."""

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs: Any) -> Stream:
        if kwargs:  # torch.Stream(stream_id=, device_index=, device_type=): an existing stream
            return super().__new__(cls, **kwargs)
        index = checked_index(device)
        return super().__new__(cls, device=torch.device(NAME, index), priority=priority)


def Event(enable_timing: bool = False, blocking: bool = False,  # noqa: N802 - torch.cuda's name
          interprocess: bool = False) -> torch.Event:
    """An emu event on the current device (``torch.emu.Event(enable_timing=False, ...)``): a
    plain ``torch.Event``, not a subclass (``torch.Event.elapsed_time`` takes only that type)."""
    return torch.Event(device=torch.device(NAME, checked_index(None)),
                       enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)


def _stream(index: int, stream_id: int) -> Stream:
    return Stream(stream_id=stream_id, device_index=index, device_type=PRIVATEUSE1_CODE)


def current_stream(device: Any = None) -> Stream:
    """The stream work on ``device`` (default: the current one) goes to in this thread."""
    index = checked_index(device)
    stream_id = int(lib().devcaps_emu_current_stream(index))
    if stream_id < 0:
        raise out_of_range(index)
    return _stream(index, stream_id)


def default_stream(device: Any = None) -> Stream:
    return _stream(checked_index(device), DEFAULT_STREAM_ID)


def set_stream(stream: torch.Stream) -> None:
    """Make ``stream`` the current stream of its device in this thread."""
    _exchange(stream)


def _exchange(stream: torch.Stream) -> torch.Stream:
    if int(stream.device_type) != PRIVATEUSE1_CODE:
        raise DevcapsValueError(f"expected a stream of an emu device, got {stream}")
    index = int(stream.device_index)
    previous = int(lib().devcaps_emu_exchange_stream(index, int(stream.stream_id)))
    if previous < 0:
        raise out_of_range(index)
    return _stream(index, previous)


class StreamContext:
    """``with torch.emu.stream(s):`` makes ``s`` current (and its device), restores both after;
    ``None`` changes nothing. Each context keeps its own previous stream, so one stream may be
    entered in nested contexts."""

    def __init__(self, stream: torch.Stream | None) -> None:
        self.stream = stream
        self._previous: list[tuple[torch.Stream, int]] = []

    def __enter__(self) -> torch.Stream | None:
        if self.stream is not None:
            device = int(lib().devcaps_emu_current_device())
            if lib().devcaps_emu_set_device(int(self.stream.device_index)) != 0:
                raise out_of_range(int(self.stream.device_index))
            self._previous.append((_exchange(self.stream), device))
        return self.stream

    def __exit__(self, *exc: object) -> None:
        if self.stream is not None:
            previous, device = self._previous.pop()
            _exchange(previous)
            lib().devcaps_emu_set_device(device)


def stream(stream: torch.Stream | None) -> StreamContext:
    return StreamContext(stream)
