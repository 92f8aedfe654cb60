"""What shapes a registry: override files, command-line settings, a profile, probing knobs."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from pytest_devcaps.errors import ConfigError
from pytest_devcaps.model import DeviceIdentity, Level


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


@dataclass(frozen=True)
class RegistryOptions:
    """Everything that shapes a registry; built from pytest options or CLI flags."""

    overrides: tuple[str, ...] = ()
    settings: tuple[CapabilitySetting, ...] = ()
    profile: str | None = None
    reprobe: bool = False
    cache_dir: Path | None = None
    probe_timeout: float = 10.0

    def __post_init__(self) -> None:
        check_probe_timeout(self.probe_timeout)


#: The longest probe timeout accepted: a probe still running after a day has hung.
MAX_PROBE_TIMEOUT = 86400.0


def check_probe_timeout(value: object, *, source: str = "probe_timeout") -> float:
    """``value`` as a probe timeout in seconds: a finite number above 0 and at most a day.

    Anything else is a ConfigError: ``inf`` or ``nan`` would fail every probe (and, cached,
    every later run), 0 or less would time out every probe at once.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"expected a number of seconds, got {type(value).__name__}",
                          key=source)
    finite = math.isfinite(value) if isinstance(value, float) else value.bit_length() < 64
    if not (finite and 0 < value <= MAX_PROBE_TIMEOUT):
        shown = repr(value) if isinstance(value, float) or finite else "a huge number"
        raise ConfigError(f"must be a finite number of seconds above 0 and at most "
                          f"{MAX_PROBE_TIMEOUT:g}, got {shown}", key=source)
    return float(value)
