"""Command-line options, ini keys and environment variables, resolved with their source.

Precedence: command line, then ``PYTEST_DEVCAPS_*`` environment variables, then ini keys
(markers beat all of them for the tests they decorate). A bad value names where it came from.
The options and keys are declared in :mod:`pytest_devcaps.session.options`.

The variables are read and checked by :func:`pytest_devcaps.environment.environment_settings`,
which the unittest bridge (:mod:`pytest_devcaps.testcase`) calls too: a value refused under pytest
is refused under unittest with the same words (a selection that names nothing, ``,,``, included).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_devcaps.errors import ConfigError
from pytest_devcaps._util.durations import (
    DEFAULT_PROBE_TIMEOUT,
    MAX_PROBE_TIMEOUT,
    check_probe_timeout,
    parse_seconds,
)

from pytest_devcaps.environment import (
    HARDWARE_READINGS,
    Setting,
    check_files,
    check_reading,
    environment_settings,
    hardware_setting,
    names_setting,
)
from pytest_devcaps.session.options import DEFAULT_RANK_TIMEOUT

if TYPE_CHECKING:  # loaded where used
    from pytest_devcaps.registry.inputs import CapabilitySetting, RegistryOptions


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
    expect: Setting = Setting((), "default")
    """Expectations files (paths), and where they were named."""
    expect_strict: Setting = Setting(False, "default")

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
        if self.expect.value:
            found.append(self.expect.source)
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
        flags += [f"--devcaps-expect={p}" for p in self.expect.value]
        if self.expect_strict.value:
            flags.append("--devcaps-expect-strict")
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


def _layered(config: pytest.Config, option: str, env: Setting, ini: str) -> Setting:
    """The command line's value, else the environment's (already checked), else the ini key's."""
    cli = config.getoption(option)
    if cli:
        return Setting(cli, f"--{option.replace('_', '-')}")
    if env.value:
        return env
    value = config.getini(ini) if ini else None
    if value:
        return Setting(value, f"ini option {ini} in {config.inipath}")
    return Setting(None, "default")


def _layered_names(config: pytest.Config, option: str, env: Setting, ini: str) -> Setting:
    found = _layered(config, option, env, ini)
    return found if found is env else names_setting(found)


def resolve_settings(config: pytest.Config) -> DevcapsSettings:
    """Resolve every option with its source; raises :class:`ConfigError` naming a bad one."""
    env = environment_settings()
    timeout = _layered(config, "devcaps_probe_timeout", env.probe_timeout, "devcaps_probe_timeout")
    timeout_value = DEFAULT_PROBE_TIMEOUT
    if timeout is env.probe_timeout:
        timeout_value = timeout.value
    elif timeout.value not in (None, ""):
        timeout_value = check_probe_timeout(timeout.value, source=timeout.source)
    return DevcapsSettings(
        devices=_layered_names(config, "devcaps_devices", env.devices, "devcaps_devices"),
        except_=_layered_names(config, "devcaps_except", env.except_, "devcaps_except"),
        overrides=_overrides(config, env.overrides),
        profile=_layered(config, "devcaps_profile", env.profile, ""),
        require=_layered_names(config, "devcaps_require", env.require, "devcaps_require"),
        capability_settings=_capability_settings(config),
        json_path=_json_path(config.getoption("devcaps_json")),
        reprobe=bool(config.getoption("devcaps_reprobe")),
        probe_timeout=Setting(timeout_value, timeout.source),
        pin_workers=bool(config.getoption("devcaps_pin_workers")),
        hardware=_hardware(config, env.hardware),
        hardware_reading=_hardware_reading(config, env.hardware_reading),
        all_ranks=bool(config.getoption("devcaps_all_ranks")),
        rank_timeout=_rank_timeout(config.getoption("devcaps_rank_timeout")),
        expect=_files(config, "devcaps_expect", env.expect, "expectations"),
        expect_strict=_expect_strict(config, env.expect_strict),
    )


def _overrides(config: pytest.Config, env: Setting) -> Setting:
    return _files(config, "devcaps_overrides", env, "override")


def _files(config: pytest.Config, option: str, env: Setting, what: str) -> Setting:
    """Files named on the command line, else in the environment (checked already), else in
    the ini file; each must be a regular file."""
    if config.getoption(option):
        files = Setting(tuple(Path(p) for p in config.getoption(option)),
                        f"--{option.replace('_', '-')}")
    elif env.value:
        return env  # checked by environment_settings
    else:
        files = Setting(tuple(config.getini(option)), f"ini option {option} in {config.inipath}")
    check_files(files, what)
    return files


def _expect_strict(config: pytest.Config, env: Setting) -> Setting:
    if config.getoption("devcaps_expect_strict"):
        return Setting(True, "--devcaps-expect-strict")
    if env.value is not None:
        return env
    if config.getini("devcaps_expect_strict"):
        return Setting(True, f"ini option devcaps_expect_strict in {config.inipath}")
    return Setting(False, "default")


def _capability_settings(config: pytest.Config) -> tuple[CapabilitySetting, ...]:
    if not config.getoption("devcaps_set"):
        return ()
    from pytest_devcaps.registry.inputs import CapabilitySetting

    return tuple(CapabilitySetting.parse(text, source="--devcaps-set")
                 for text in config.getoption("devcaps_set"))


def _hardware(config: pytest.Config, env: Setting) -> Setting:
    """The selected hardware classes, lower-cased; checked against the vocabulary at collection
    (a name of an out-of-tree backend needs the registry). A value that names nothing (``,,``)
    is an error, not "every class"."""
    cli = config.getoption("devcaps_hardware")
    if cli:
        return hardware_setting(Setting(cli, "--devcaps-hardware"))
    if env.value:
        return env
    ini = config.getini("devcaps_hardware")
    return hardware_setting(Setting(ini, f"ini option devcaps_hardware in {config.inipath}")
                             if ini else Setting(None, "default"))


def _hardware_reading(config: pytest.Config, env: Setting) -> Setting:
    found = _layered(config, "devcaps_hardware_reading", env, "devcaps_hardware_reading")
    if found.value is None:
        return Setting(HARDWARE_READINGS[0], "default")
    if found is env:
        return env  # checked by environment_settings
    return Setting(check_reading(str(found.value), found.source), found.source)


