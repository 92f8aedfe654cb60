"""Durations from options, environment variables, ini keys and arguments: seconds checked once.

Apart from ``registry.inputs`` so that resolving a session's options costs no import of the
registry's option records.
"""

from __future__ import annotations

import math
import threading

from pytest_devcaps.errors import ConfigError, short_repr

DEFAULT_PROBE_TIMEOUT = 10.0
#: The longest probe timeout accepted: a probe still running after a day has hung.
MAX_PROBE_TIMEOUT = 86400.0


def parse_seconds(value: object, source: str, *, maximum: float = threading.TIMEOUT_MAX) -> float:
    """Seconds from an option, environment variable, ini key or argument (text or a number):
    finite, above 0 and at most ``maximum``.

    Anything else (``soon``, ``0``, ``-5``, ``nan``, ``inf``, a bool) is a :class:`ConfigError`
    naming ``source``: ``inf`` would pass ``float()`` and then fail every wait with
    ``OverflowError``. The default ``maximum`` is ``threading.TIMEOUT_MAX``, the longest wait
    a lock (and so ``queue.Queue.get``) accepts.
    """
    seconds = math.nan
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        try:
            seconds = float(value)
        except (ValueError, OverflowError):
            pass
    if not 0 < seconds <= maximum:  # false for nan, inf, 0 and negatives
        raise ConfigError(f"must be a finite number of seconds above 0 and at most {maximum:g}, "
                          f"got {short_repr(value)}", file=source)
    return seconds


def check_probe_timeout(value: object, *, source: str = "probe_timeout") -> float:
    """A probe timeout from any surface: :func:`parse_seconds`, at most a day."""
    return parse_seconds(value, source, maximum=MAX_PROBE_TIMEOUT)
