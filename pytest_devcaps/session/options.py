"""Command-line options, ini keys and environment variables, resolved with their source.

Precedence: command line, then ``PYTEST_DEVCAPS_*`` environment variables, then ini keys
(markers beat all of them for the tests they decorate). A bad value names where it came from.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import pytest

from pytest_devcaps.errors import ConfigError
from pytest_devcaps._util.durations import (
    DEFAULT_PROBE_TIMEOUT,
    MAX_PROBE_TIMEOUT,
    check_probe_timeout,
    parse_seconds,
)

if TYPE_CHECKING:  # loaded where used: every pytest session resolves these options
    from pytest_devcaps.registry.inputs import CapabilitySetting, RegistryOptions

ENV_DEVICES = "PYTEST_DEVCAPS_DEVICES"
ENV_EXCEPT = "PYTEST_DEVCAPS_EXCEPT"
ENV_OVERRIDES = "PYTEST_DEVCAPS_OVERRIDES"
ENV_PROFILE = "PYTEST_DEVCAPS_PROFILE"
ENV_REQUIRE = "PYTEST_DEVCAPS_REQUIRE"
ENV_PROBE_TIMEOUT = "PYTEST_DEVCAPS_PROBE_TIMEOUT"
DEFAULT_RANK_TIMEOUT = 300.0
"""Seconds the ranks of a launched world wait for each other (collection, results)."""
ENV_HARDWARE = "PYTEST_DEVCAPS_HARDWARE"
ENV_HARDWARE_READING = "PYTEST_DEVCAPS_HARDWARE_READING"
#: How a declared hardware class is read: ``devcaps`` (the class decides where a test runs: an
#: ``accelerator`` test skips on the CPU) or ``pytorch`` (PyTorch's reviewers' reading: the class
#: only labels and selects, an ``ACCELERATOR`` class may also run on the CPU).
HARDWARE_READINGS = ("devcaps", "pytorch")

DEVICES_HELP = ("comma-separated device types to run device tests on, each present here "
                "(default: every type present)")
EXCEPT_HELP = "comma-separated device types to leave out"
OVERRIDES_HELP = "capability override YAML file (repeatable; later files win)"
PROFILE_HELP = "plan against a device profile (shipped name or YAML file) instead of running"
REQUIRE_HELP = ("comma-separated capabilities this runner must have: a test skipped for one "
                "is an error instead")
TIMEOUT_HELP = "seconds one empirical probe may take before it counts as unknown"
HARDWARE_HELP = ("comma-separated hardware classes to run (generic, accelerator, a device type or "
                 "vendor); other tests are deselected")
READING_HELP = ("how a declared hardware class is read: devcaps (default: an accelerator-class test "
                "skips on the CPU, a device type's or vendor's runs only there) or pytorch (the "
                "class only labels and selects tests, as PyTorch's ACCELERATOR classes that also "
                "run on the CPU)")


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("devcaps", "device capabilities (pytest-devcaps)")
    group.addoption("--devcaps-devices", dest="devcaps_devices", metavar="TYPES", help=DEVICES_HELP)
    group.addoption("--devcaps-except", dest="devcaps_except", metavar="TYPES", help=EXCEPT_HELP)
    group.addoption("--devcaps-overrides", dest="devcaps_overrides", metavar="FILE",
                    action="append", default=[], help=OVERRIDES_HELP)
    group.addoption("--devcaps-profile", dest="devcaps_profile", metavar="NAME|FILE", help=PROFILE_HELP)
    group.addoption("--devcaps-require", dest="devcaps_require", metavar="CAPS", help=REQUIRE_HELP)
    group.addoption("--devcaps-set", dest="devcaps_set", metavar="CAP=LEVEL[@DEVICE]",
                    action="append", default=[],
                    help="force one capability's level (repeatable), e.g. dtype.bf16=unsupported@cpu")
    group.addoption("--devcaps-json", dest="devcaps_json", metavar="PATH",
                    help="write a JSON report (devices, capability records, per-test outcomes)")
    group.addoption("--devcaps-reprobe", dest="devcaps_reprobe", action="store_true",
                    help="ignore the probe cache and probe again")
    group.addoption("--devcaps-probe-timeout", dest="devcaps_probe_timeout", metavar="SECONDS",
                    help=TIMEOUT_HELP)
    group.addoption("--devcaps-pin-workers", dest="devcaps_pin_workers", action="store_true",
                    help="under xdist, give each worker its own slice of the accelerators (through "
                         "the backend's visible-devices variable)")
    group.addoption("--devcaps-all-ranks", dest="devcaps_all_ranks", action="store_true",
                    help="under torchrun, every rank prints its terminal output (default: rank 0)")
    group.addoption("--devcaps-rank-timeout", dest="devcaps_rank_timeout", metavar="SECONDS",
                    help="under torchrun, how long a rank waits for the others at collection and "
                         "at the end of the session (default 300)")
    parser.addini("devcaps_devices", DEVICES_HELP, type="string", default="")
    parser.addini("devcaps_except", EXCEPT_HELP, type="string", default="")
    parser.addini("devcaps_overrides", OVERRIDES_HELP + " (relative to the ini file)", type="paths",
                  default=[])
    parser.addini("devcaps_require", REQUIRE_HELP, type="string", default="")
    parser.addini("devcaps_probe_timeout", TIMEOUT_HELP, type="string", default="")
    _add_hardware_option(group, parser)


def _add_hardware_option(group: Any, parser: pytest.Parser) -> None:
    group.addoption("--devcaps-hardware", dest="devcaps_hardware", metavar="CLASSES",
                    help=HARDWARE_HELP)
    parser.addini("devcaps_hardware", HARDWARE_HELP, type="string", default="")
    group.addoption("--devcaps-hardware-reading", dest="devcaps_hardware_reading",
                    metavar="devcaps|pytorch", help=READING_HELP)
    parser.addini("devcaps_hardware_reading", READING_HELP, type="string", default="")


@dataclass(frozen=True)
class Setting:
    """One resolved value and where it came from (``--devcaps-devices``, ``PYTEST_DEVCAPS_...``, ini)."""

    value: Any
    source: str


@dataclass(frozen=True)
class DevcapsSettings:
    devices: Setting
    except_: Setting
    overrides: Setting
    profile: Setting
    require: Setting
    capability_settings: tuple[CapabilitySetting, ...]
    json_path: str | None
    reprobe: bool
    probe_timeout: Setting
    pin_workers: bool
    hardware: Setting = Setting((), "default")
    hardware_reading: Setting = Setting(HARDWARE_READINGS[0], "default")
    all_ranks: bool = False
    rank_timeout: float = 300.0  # DEFAULT_RANK_TIMEOUT

    def given(self) -> list[str]:
        """Where each devcaps setting that is not a default came from (empty for a session that
        sets none): such a session builds its registry at configure time, so a bad value is a
        usage error before collection and the report header comes first. A hardware selection
        is not one of them: it is checked at collection and needs the registry only for a
        class that is not a builtin device type or vendor."""
        layered = [self.devices, self.except_, self.require, self.profile]
        found = [s.source for s in layered if s.value]
        if self.overrides.value:
            found.append(self.overrides.source)
        if self.probe_timeout.source != "default":
            found.append(self.probe_timeout.source)
        flags = {"--devcaps-set": bool(self.capability_settings), "--devcaps-json": bool(self.json_path),
                 "--devcaps-reprobe": self.reprobe, "--devcaps-pin-workers": self.pin_workers}
        return found + [flag for flag, on in flags.items() if on]

    def registry_options(self) -> RegistryOptions:
        from pytest_devcaps.registry.inputs import RegistryOptions

        return RegistryOptions(
            overrides=tuple(str(p) for p in self.overrides.value),
            settings=self.capability_settings,
            profile=self.profile.value,
            reprobe=self.reprobe,
            probe_timeout=self.probe_timeout.value,
        )

    def reproduce_flags(self) -> list[str]:
        """The flags that reproduce this run's device selection and capability answers."""
        flags: list[str] = []
        if self.devices.value:
            flags.append(f"--devcaps-devices={','.join(self.devices.value)}")
        if self.except_.value:
            flags.append(f"--devcaps-except={','.join(self.except_.value)}")
        flags += [f"--devcaps-overrides={p}" for p in self.overrides.value]
        flags += [f"--devcaps-set={s.capability}={s.level.value}" + (f"@{s.device}" if s.device else "")
                  for s in self.capability_settings]
        if self.profile.value:
            flags.append(f"--devcaps-profile={self.profile.value}")
        if self.require.value:
            flags.append(f"--devcaps-require={','.join(self.require.value)}")
        if self.hardware.value:
            flags.append(f"--devcaps-hardware={','.join(self.hardware.value)}")
        if self.hardware_reading.source != "default":
            flags.append(f"--devcaps-hardware-reading={self.hardware_reading.value}")
        return flags


def _split(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _names(setting: Setting) -> Setting:
    """A comma-separated list, duplicates dropped (``cpu,cpu`` would run every test twice);
    a value that names nothing (``,``) is an error, not "no restriction"."""
    names = tuple(dict.fromkeys(_split(setting.value or "")))
    if setting.value and not names:
        raise ConfigError(f"{setting.value!r} names nothing", file=setting.source)
    return Setting(names, setting.source)


def _json_path(text: str | None) -> str | None:
    """``--devcaps-json``, checked now: at the end of the run it would be too late to say."""
    if text is None:
        return None
    if not text.strip():
        raise ConfigError("needs a file path", file="--devcaps-json")
    from pytest_devcaps._util.files import replace_refusal

    refusal = replace_refusal(Path(text))
    if refusal:
        raise ConfigError(refusal, file="--devcaps-json")
    return text


def _rank_timeout(text: str | None) -> float:
    if text in (None, ""):
        return DEFAULT_RANK_TIMEOUT
    return parse_seconds(text, "--devcaps-rank-timeout", maximum=MAX_PROBE_TIMEOUT)


def _layered(config: pytest.Config, option: str, env: str, ini: str) -> Setting:
    cli = config.getoption(option)
    if cli:
        return Setting(cli, f"--{option.replace('_', '-')}")
    if os.environ.get(env):
        return Setting(os.environ[env], f"{env} environment variable")
    value = config.getini(ini) if ini else None
    if value:
        return Setting(value, f"ini option {ini} in {config.inipath}")
    return Setting(None, "default")


def resolve_settings(config: pytest.Config) -> DevcapsSettings:
    """Resolve every option with its source; raises :class:`ConfigError` naming a bad one."""
    devices = _layered(config, "devcaps_devices", ENV_DEVICES, "devcaps_devices")
    except_ = _layered(config, "devcaps_except", ENV_EXCEPT, "devcaps_except")
    require = _layered(config, "devcaps_require", ENV_REQUIRE, "devcaps_require")
    profile = _layered(config, "devcaps_profile", ENV_PROFILE, "")
    timeout = _layered(config, "devcaps_probe_timeout", ENV_PROBE_TIMEOUT, "devcaps_probe_timeout")

    overrides: Setting
    if config.getoption("devcaps_overrides"):
        overrides = Setting(tuple(Path(p) for p in config.getoption("devcaps_overrides")),
                            "--devcaps-overrides")
    elif os.environ.get(ENV_OVERRIDES):
        overrides = Setting(tuple(Path(p) for p in os.environ[ENV_OVERRIDES].split(os.pathsep) if p),
                            f"{ENV_OVERRIDES} environment variable")
    else:
        overrides = Setting(tuple(config.getini("devcaps_overrides")),
                            f"ini option devcaps_overrides in {config.inipath}")
    for path in overrides.value:
        if not Path(path).is_file():
            state = "is not a regular file" if Path(path).exists() else "does not exist"
            raise ConfigError(f"override file {str(path)!r} {state}", file=overrides.source)

    settings: tuple[CapabilitySetting, ...] = ()
    if config.getoption("devcaps_set"):
        from pytest_devcaps.registry.inputs import CapabilitySetting

        settings = tuple(CapabilitySetting.parse(text, source="--devcaps-set")
                         for text in config.getoption("devcaps_set"))
    timeout_value = DEFAULT_PROBE_TIMEOUT
    if timeout.value not in (None, ""):
        timeout_value = check_probe_timeout(timeout.value, source=timeout.source)
    return DevcapsSettings(
        devices=_names(devices),
        except_=_names(except_),
        overrides=overrides,
        profile=profile,
        require=_names(require),
        capability_settings=settings,
        json_path=_json_path(config.getoption("devcaps_json")),
        reprobe=bool(config.getoption("devcaps_reprobe")),
        probe_timeout=Setting(timeout_value, timeout.source),
        pin_workers=bool(config.getoption("devcaps_pin_workers")),
        hardware=_hardware(config),
        hardware_reading=_hardware_reading(config),
        all_ranks=bool(config.getoption("devcaps_all_ranks")),
        rank_timeout=_rank_timeout(config.getoption("devcaps_rank_timeout")),
    )


def _hardware(config: pytest.Config) -> Setting:
    """The selected hardware classes, lower-cased; checked against the vocabulary at collection
    (a name of an out-of-tree backend needs the registry)."""
    hardware = _layered(config, "devcaps_hardware", ENV_HARDWARE, "devcaps_hardware")
    return Setting(hardware_names(hardware.value or ""), hardware.source)


def _hardware_reading(config: pytest.Config) -> Setting:
    found = _layered(config, "devcaps_hardware_reading", ENV_HARDWARE_READING,
                     "devcaps_hardware_reading")
    if found.value is None:
        return Setting(HARDWARE_READINGS[0], "default")
    return Setting(check_reading(str(found.value), found.source), found.source)


def check_reading(text: str, source: str) -> str:
    """``devcaps`` or ``pytorch`` (case and spaces ignored); anything else is a ConfigError
    naming the closest (the unittest bridge reads the variable with this too)."""
    from pytest_devcaps.errors import did_you_mean

    value = text.strip().lower()
    if value not in HARDWARE_READINGS:
        raise ConfigError(f"unknown hardware reading {text!r}{did_you_mean(value, HARDWARE_READINGS)}; "
                          f"expected {' or '.join(HARDWARE_READINGS)}", file=source)
    return value


def hardware_names(text: str) -> tuple[str, ...]:
    """``--devcaps-hardware`` / ``PYTEST_DEVCAPS_HARDWARE`` text as lower-case class names
    (empty entries dropped); the unittest bridge reads the variable with this too."""
    return tuple(part.lower() for part in _split(text))


