"""What shapes a registry: override files, command-line settings, a profile, probing knobs."""

from __future__ import annotations

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
