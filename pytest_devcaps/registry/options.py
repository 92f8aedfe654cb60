"""What shapes a registry: override files, command-line settings, a profile, probing knobs."""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from pytest_devcaps.errors import ConfigError, did_you_mean, short_repr
from pytest_devcaps.model import DeviceIdentity, Level


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


@dataclass(frozen=True)
class CapabilitySetting:
    """A capability level forced from the command line: ``CAP=LEVEL`` or ``CAP=LEVEL@DEVICE``."""

    capability: str
    level: Level
    device: str | None = None

    @classmethod
    def parse(cls, text: str, *, source: str = "command line") -> CapabilitySetting:
        name, sep, rest = text.partition("=")
        if not sep or not name.strip() or not rest.strip():
            raise ConfigError(f"expected CAPABILITY=LEVEL[@DEVICE], got {text!r}", file=source)
        level_text, _, device = rest.partition("@")
        try:
            level = Level.parse(level_text)
        except ValueError as exc:
            raise ConfigError(str(exc), file=source, key=name.strip()) from None
        return cls(name.strip(), level, device.strip() or None)

    def applies_to(self, identity: DeviceIdentity) -> bool:
        return self.device is None or self.device in (identity.type, identity.key)


def check_setting_devices(settings: Iterable[CapabilitySetting],
                          identities: Sequence[DeviceIdentity]) -> None:
    """Refuse a ``CAP=LEVEL@DEVICE`` whose device matches none of ``identities``: it would
    change nothing, silently (``@cdua``, or ``@cuda`` on a machine without one)."""
    keys = [identity.key for identity in identities]
    names = list(dict.fromkeys([identity.type for identity in identities] + keys))
    for setting in settings:
        if setting.device is not None and not any(setting.applies_to(i) for i in identities):
            raise ConfigError(f"no device here matches {setting.device!r}"
                              f"{did_you_mean(setting.device, names)}; devices: {', '.join(keys)}",
                              file="command line", key=f"{setting.capability}@{setting.device}")


@dataclass(frozen=True)
class RegistryOptions:
    """Everything that shapes a registry; built from pytest options or CLI flags."""

    overrides: tuple[str, ...] = ()
    settings: tuple[CapabilitySetting, ...] = ()
    profile: str | None = None
    reprobe: bool = False
    cache_dir: Path | None = None
    probe_timeout: float = DEFAULT_PROBE_TIMEOUT

    def __post_init__(self) -> None:
        # Library code builds options too: a timeout is checked wherever it enters.
        if not isinstance(self.probe_timeout, (int, float)):
            raise ConfigError(f"expected a number of seconds, got {type(self.probe_timeout).__name__}",
                              file="probe_timeout")
        check_probe_timeout(self.probe_timeout)
