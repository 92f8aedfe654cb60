"""The emu device count and device memory of this process, read from the environment and checked
(no torch)."""

from __future__ import annotations

from typing import Mapping

from pytest_devcaps._util.environ import ENV_EMU_DEVICES, ENV_EMU_MEMORY
from pytest_devcaps._util.sizes import format_size, size_bytes
from pytest_devcaps.emu import MAX_DEVICES, VISIBLE_ENV
from pytest_devcaps.errors import ConfigError


class EmuConfigError(ConfigError):
    """``PYTEST_DEVCAPS_EMU_DEVICES``, ``EMU_VISIBLE_DEVICES`` or ``PYTEST_DEVCAPS_EMU_MEMORY``
    holds something unusable."""


#: The least memory an emu device may have.
MIN_DEVICE_MEMORY = 2**20


def check_requested(environ: Mapping[str, str]) -> None:
    """Refuse an unusable emu device count where emu devices are asked for
    (:class:`EmuConfigError`); the pytest plugin calls it when pytest starts, so a bad count is
    one usage error, not a test module's ``import torch`` failing in torch's autoload and the next
    one crashing on the half-imported torch."""
    if requested(environ):
        device_memory(environ, device_count(environ))


def requested(environ: Mapping[str, str]) -> bool:
    """True when this process asks for emu devices (the variable is set and not empty)."""
    return bool(environ.get(ENV_EMU_DEVICES, "").strip())


def device_count(environ: Mapping[str, str]) -> int:
    """How many emu devices this process sees: ``PYTEST_DEVCAPS_EMU_DEVICES`` devices, narrowed
    and renumbered by ``EMU_VISIBLE_DEVICES`` (comma-separated indices, each once; empty: none,
    as ``CUDA_VISIBLE_DEVICES=""`` hides every CUDA device)."""
    text = environ.get(ENV_EMU_DEVICES, "").strip()
    try:
        total = int(text)
    except ValueError:
        raise EmuConfigError(f"{ENV_EMU_DEVICES}={text!r} is not a whole number of emu devices "
                             f"(0 to {MAX_DEVICES})") from None
    if not 0 <= total <= MAX_DEVICES:
        raise EmuConfigError(f"{ENV_EMU_DEVICES}={total} is out of range: 0 to {MAX_DEVICES}")
    visible = environ.get(VISIBLE_ENV)
    if visible is None:
        return total
    entries = [part.strip() for part in visible.split(",")] if visible.strip() else []
    seen: set[int] = set()
    for entry in entries:
        if not entry.isdigit() or int(entry) >= total or int(entry) in seen:
            why = ("repeated" if entry.isdigit() and int(entry) in seen
                   else f"not an index below {ENV_EMU_DEVICES}={total}")
            raise EmuConfigError(f"{VISIBLE_ENV}={visible!r}: entry {entry!r} is {why}")
        seen.add(int(entry))
    return len(entries)


def device_memory(environ: Mapping[str, str], count: int, host_ram: int | None = None) -> int:
    """Bytes of memory each emu device has. Every device lives in host memory, so a test that
    fills a device the way GPU tests do (``mem_get_info``, then allocate all but a margin) would
    take the host's memory, and the kernel would kill the process: emu devices are bounded
    instead, and an allocation past the bound raises ``torch.OutOfMemoryError`` as on a GPU.
    ``PYTEST_DEVCAPS_EMU_MEMORY`` (``"4GiB"``, ``"4GB"``, bytes) sets it, at most the host's
    RAM; by default the devices share half the host's RAM (``host_ram``: this machine's)."""
    from pytest_devcaps.backends.base import total_ram_bytes

    ram = host_ram if host_ram is not None else (total_ram_bytes() or 0)
    text = environ.get(ENV_EMU_MEMORY, "").strip()
    if not text:
        return max(MIN_DEVICE_MEMORY, ram // (2 * max(count, 1)))
    size = size_bytes(text)
    if size is None:
        raise EmuConfigError(f"{ENV_EMU_MEMORY}={text!r} is not a size like '4GiB' (2**30 bytes "
                             "each), '4GB' (10**9) or a number of bytes")
    if size < MIN_DEVICE_MEMORY or (ram and size > ram):
        most = f" and at most the host's RAM ({format_size(ram)})" if ram else ""
        raise EmuConfigError(f"{ENV_EMU_MEMORY}={text!r}: an emu device has at least "
                             f"{format_size(MIN_DEVICE_MEMORY)}{most}")
    return size
