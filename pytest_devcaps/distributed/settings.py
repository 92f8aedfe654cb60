"""The harness's knobs: environment variables and ``world_size``, validated where they are read.

Every value is read when a world is about to start (never at import) and a bad one raises
:class:`ConfigError` naming the variable or argument and what it takes. The variables are also
checked once with the session's other settings (:func:`check_environment`, called by
``environment.environment_settings``): a bad one is a one-line usage error of the whole
session (pytest's exit 4), as every other bad setting is, not a failed test with the harness's
traceback. The variables are ``PYTEST_DEVCAPS_DIST_*``; their old
names (``DEVCAPS_DIST_*``) still work with a deprecation warning (:mod:`pytest_devcaps._util.environ`).
Standard library only.
"""

from __future__ import annotations

import os
import warnings
from typing import Mapping

from pytest_devcaps.errors import ConfigError, DevcapsDeprecationWarning
from pytest_devcaps._util.durations import parse_seconds
from pytest_devcaps._util.environ import (
    ENV_DIST_PG_TIMEOUT,
    ENV_DIST_REUSE,
    ENV_DIST_SHARE_DEVICES,
    ENV_DIST_TIMEOUT,
    lookup,
)

#: The earlier names of the variables (the table in ``_util.environ`` is the source).
TIMEOUT_VARIABLE = ENV_DIST_TIMEOUT
PG_TIMEOUT_VARIABLE = ENV_DIST_PG_TIMEOUT
SHARE_VARIABLE = ENV_DIST_SHARE_DEVICES
REUSE_VARIABLE = ENV_DIST_REUSE
DEFAULT_TIMEOUT_S = 240.0
DEFAULT_PG_TIMEOUT_S = 60.0
MAX_SPAWNED_WORLD_SIZE = 1024
"""More ranks than this on one machine is a mistake (each rank is a Python interpreter with
torch imported); bigger worlds come from a launcher across machines."""
RANK_HOST_MEMORY_BYTES = 256 * 2**20
"""Host memory of one idle rank: an interpreter with torch and torch.distributed imported that
has run a gloo task (torch 2.13, Linux x86-64: 221 MiB private, 255 MiB proportional set size
with the shared libraries' pages split between ranks; 452 MiB resident counting them whole)."""

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")


def seconds(value: object, name: str) -> float:
    """``value`` as seconds (:func:`pytest_devcaps._util.durations.parse_seconds`: finite, above 0, at
    most what a wait accepts); ``name`` (a variable or argument) is in the error."""
    return parse_seconds(value, name)


def env_seconds(variable: str, default: float,
                environ: Mapping[str, str] | None = None) -> float:
    """A timeout from the environment (``default`` when unset or empty); an error names the
    variable that was set (the old name, when that one was)."""
    found = lookup(variable, environ)
    if found is None or not found.value.strip():
        return default
    return seconds(found.value.strip(), found.variable)


def env_flag(variable: str, default: bool, environ: Mapping[str, str] | None = None) -> bool:
    """A yes/no variable: 1/true/yes/on or 0/false/no/off (case-insensitive); unset: ``default``."""
    found = lookup(variable, environ)
    if found is None:
        return default
    raw = found.value.strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ConfigError(f"expected 1/true/yes/on or 0/false/no/off, got {found.value!r}",
                      file=found.variable)


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """Every ``PYTEST_DEVCAPS_DIST_*`` variable (and its old name) checked now: a bad value, or
    the old and new names set to different values, is a :class:`ConfigError` naming it. The
    deprecation warning of an old name is left to the reads where the value is used."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DevcapsDeprecationWarning)
        env_seconds(ENV_DIST_TIMEOUT, DEFAULT_TIMEOUT_S, environ)
        env_seconds(ENV_DIST_PG_TIMEOUT, DEFAULT_PG_TIMEOUT_S, environ)
        env_flag(ENV_DIST_SHARE_DEVICES, False, environ)
        env_flag(ENV_DIST_REUSE, True, environ)


def watchdog_timeout() -> float:
    """``PYTEST_DEVCAPS_DIST_TIMEOUT``: how long a world may run before its ranks are stopped."""
    return env_seconds(ENV_DIST_TIMEOUT, DEFAULT_TIMEOUT_S)


def pg_timeout() -> float:
    """``PYTEST_DEVCAPS_DIST_PG_TIMEOUT``: the process group's collective timeout."""
    return env_seconds(ENV_DIST_PG_TIMEOUT, DEFAULT_PG_TIMEOUT_S)


def share_devices() -> bool:
    """``PYTEST_DEVCAPS_DIST_SHARE_DEVICES``: several ranks may share one accelerator."""
    return env_flag(ENV_DIST_SHARE_DEVICES, False)


def reuse_worlds() -> bool:
    """``PYTEST_DEVCAPS_DIST_REUSE`` (default on): keep worlds alive between ``distributed.run`` calls."""
    return env_flag(ENV_DIST_REUSE, True)


def world_size(value: object, who: str = "distributed.run") -> int:
    """``value`` as the size of a world this machine spawns: an int from 1 to
    :data:`MAX_SPAWNED_WORLD_SIZE` (a bool, a float such as 2.0 or a string is refused)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"world_size must be an int, got {value!r} ({type(value).__name__})",
                          file=who)
    if value < 1:
        raise ConfigError(f"world_size must be >= 1, got {value}", file=who)
    if value > MAX_SPAWNED_WORLD_SIZE:
        raise ConfigError(
            f"world_size {value} is more ranks than one machine spawns (at most "
            f"{MAX_SPAWNED_WORLD_SIZE}); start bigger worlds with a launcher (torchrun) across "
            "machines", file=who)
    return value


def available_host_memory() -> int | None:
    """Bytes of memory available to new processes (Linux ``MemAvailable``), None if unknown."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None


def memory_shortfall(size: int, available: int | None) -> str | None:
    """Why ``size`` ranks would not fit in ``available`` bytes of host memory, or None."""
    needed = size * RANK_HOST_MEMORY_BYTES
    if available is None or needed <= available:
        return None
    return (f"a world of {size} ranks needs about {needed / 2**30:.1f} GiB of host memory "
            f"({RANK_HOST_MEMORY_BYTES // 2**20} MiB per rank before the test's own tensors); "
            f"{available / 2**30:.1f} GiB is available: expect swapping or the OOM killer")
