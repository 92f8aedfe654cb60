"""What shapes a registry: override files, command-line settings, a profile, probing knobs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

from pytest_devcaps.errors import ConfigError, did_you_mean
from pytest_devcaps._util.durations import DEFAULT_PROBE_TIMEOUT, check_probe_timeout

if TYPE_CHECKING:  # the model loads where a setting is parsed: every pytest session imports this
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
        from pytest_devcaps.model import Level

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
