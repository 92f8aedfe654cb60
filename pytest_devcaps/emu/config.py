"""The emu device count of this process, read from the environment and checked (no torch)."""

from __future__ import annotations

from typing import Mapping

from pytest_devcaps._util.environ import ENV_EMU_DEVICES
from pytest_devcaps.emu import MAX_DEVICES, VISIBLE_ENV
from pytest_devcaps.errors import ConfigError


class EmuConfigError(ConfigError):
    """``PYTEST_DEVCAPS_EMU_DEVICES`` or ``EMU_VISIBLE_DEVICES`` holds something unusable."""


def check_requested(environ: Mapping[str, str]) -> None:
    """Refuse an unusable emu device count where emu devices are asked for
    (:class:`EmuConfigError`); the pytest plugin calls it when pytest starts, so a bad count is
    one usage error, not a test module's ``import torch`` failing in torch's autoload and the next
    one crashing on the half-imported torch."""
    if requested(environ):
        device_count(environ)


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
