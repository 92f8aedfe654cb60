"""The ``PYTEST_DEVCAPS_*`` environment variables, read and checked once, each value a
:class:`Setting` with its source; the checks every selection gets (device types present, required
capabilities in the catalogue). One reading for the pytest session (``session/options.py`` layers
the command line and ini keys over it) and for the unittest bridge (``testcase.py``), so a value
pytest refuses is refused under unittest with the same words. No pytest import.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from pytest_devcaps.errors import ConfigError, UnknownCapabilityError, did_you_mean
from pytest_devcaps._util.durations import check_probe_timeout
from pytest_devcaps._util.environ import (
    ENV_DEVICES,
    ENV_EXCEPT,
    ENV_EXPECT,
    ENV_EXPECT_STRICT,
    ENV_HARDWARE,
    ENV_HARDWARE_READING,
    ENV_OVERRIDES,
    ENV_PROBE_TIMEOUT,
    ENV_PROFILE,
    ENV_REQUIRE,
    check_names,
)

if TYPE_CHECKING:
    from pytest_devcaps.config.catalogue import Catalogue

#: How a declared hardware class is read: ``devcaps`` (the class decides where a test runs: an
#: ``accelerator`` test skips on the CPU) or ``pytorch`` (PyTorch's reviewers' reading: the class
#: only labels and selects, an ``ACCELERATOR`` class may also run on the CPU).
HARDWARE_READINGS = ("devcaps", "pytorch")

@dataclass(frozen=True)
class Setting:
    """One resolved value and where it came from (``--devcaps-devices``, ``PYTEST_DEVCAPS_...``, ini)."""

    value: Any
    source: str


def _split(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def names_setting(setting: Setting) -> Setting:
    """A comma-separated list, duplicates dropped (``cpu,cpu`` would run every test twice);
    a value that names nothing (``,``) is an error, not "no restriction"."""
    names = tuple(dict.fromkeys(_split(setting.value or "")))
    if setting.value and not names:
        raise ConfigError(f"{setting.value!r} names nothing", file=setting.source)
    return Setting(names, setting.source)


def hardware_setting(setting: Setting) -> Setting:
    names = hardware_names(setting.value or "")
    if setting.value and not names:
        raise ConfigError(f"{setting.value!r} names nothing", file=setting.source)
    return Setting(names, setting.source)


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
    (empty entries dropped)."""
    return tuple(dict.fromkeys(part.lower() for part in _split(text)))


def check_device_types(devices: Setting, except_: Setting, present: Sequence[str]) -> None:
    """A device type named in a selection must be a known one (ConfigError with the closest)
    and, in ``devices``, present here: naming it says the run expects it."""
    from pytest_devcaps.model import KNOWN_DEVICE_TYPES

    known = list(dict.fromkeys([*KNOWN_DEVICE_TYPES, *present]))
    for setting in (devices, except_):
        for name in setting.value or ():
            if name not in known:
                raise ConfigError(f"unknown device type {name!r}{did_you_mean(name, known)}; "
                                  f"present here: {', '.join(present)}", file=setting.source)
            if name not in present and setting is devices:
                raise ConfigError(f"device type {name!r} is not present on this machine (present: "
                                  f"{', '.join(present)}); leave the option unset to run on every "
                                  "type present", file=setting.source)


ENVIRONMENT_VARIABLES = (ENV_DEVICES, ENV_EXCEPT, ENV_OVERRIDES, ENV_PROFILE, ENV_REQUIRE,
                         ENV_PROBE_TIMEOUT, ENV_HARDWARE, ENV_HARDWARE_READING, ENV_EXPECT,
                         ENV_EXPECT_STRICT)
"""The variables :func:`environment_settings` reads (``PYTEST_DEVCAPS_CACHE_DIR`` is read
where the cache lives, by everyone alike)."""


@dataclass(frozen=True)
class EnvironmentSettings:
    """What the ``PYTEST_DEVCAPS_*`` variables say, checked; an unset (or empty) variable is a
    :class:`Setting` with value ``None`` (``()`` for lists) and source ``default``."""

    devices: Setting
    except_: Setting
    overrides: Setting
    profile: Setting
    require: Setting
    probe_timeout: Setting
    hardware: Setting
    hardware_reading: Setting  # one of HARDWARE_READINGS, checked (None: unset)
    expect: Setting = Setting((), "default")
    expect_strict: Setting = Setting(None, "default")  # True / False when set


def _env(environ: Mapping[str, str], name: str) -> Setting:
    value = environ.get(name)
    return Setting(value, f"{name} environment variable") if value else Setting(None, "default")


def environment_settings(environ: Mapping[str, str] | None = None) -> EnvironmentSettings:
    """Read and check every ``PYTEST_DEVCAPS_*`` variable of :data:`ENVIRONMENT_VARIABLES`:
    a set ``PYTEST_DEVCAPS_*`` name that pytest-devcaps does not read (a typo), lists that name
    nothing, override files that are not regular files, bad timeouts and bad
    ``PYTEST_DEVCAPS_DIST_*`` values (``distributed.settings.check_environment``) raise
    :class:`ConfigError` naming the variable. The one reading for pytest and unittest."""
    env = os.environ if environ is None else environ
    check_names(env)
    from pytest_devcaps.distributed.settings import check_environment

    check_environment(env)  # the harness's variables too: a usage error now, not a failed test
    overrides = _env_files(env, ENV_OVERRIDES, "override")
    timeout = _env(env, ENV_PROBE_TIMEOUT)
    if timeout.value is not None:
        timeout = Setting(check_probe_timeout(timeout.value, source=timeout.source), timeout.source)
    return EnvironmentSettings(
        devices=names_setting(_env(env, ENV_DEVICES)), except_=names_setting(_env(env, ENV_EXCEPT)),
        overrides=overrides, profile=_env(env, ENV_PROFILE),
        require=names_setting(_env(env, ENV_REQUIRE)), probe_timeout=timeout,
        hardware=hardware_setting(_env(env, ENV_HARDWARE)),
        hardware_reading=_reading_setting(_env(env, ENV_HARDWARE_READING)),
        expect=_env_files(env, ENV_EXPECT, "expectations"),
        expect_strict=_flag_setting(_env(env, ENV_EXPECT_STRICT)))


def _env_files(env: Mapping[str, str], name: str, what: str) -> Setting:
    """An ``os.pathsep``-separated list of files in a variable, each a regular file."""
    found = _env(env, name)
    paths = tuple(Path(p) for p in (found.value or "").split(os.pathsep) if p)
    setting = Setting(paths, found.source)
    check_files(setting, what)
    return setting


FLAG_WORDS = {"1": True, "true": True, "yes": True, "on": True,
              "0": False, "false": False, "no": False, "off": False}


def _flag_setting(flag: Setting) -> Setting:
    """``1``/``0`` (or true/false, yes/no, on/off) in a variable; anything else is an error."""
    if flag.value is None:
        return flag
    word = str(flag.value).strip().lower()
    if word not in FLAG_WORDS:
        raise ConfigError(f"expected 1 or 0 (true/false, yes/no, on/off), got {flag.value!r}",
                          file=flag.source)
    return Setting(FLAG_WORDS[word], flag.source)


def _reading_setting(reading: Setting) -> Setting:
    if reading.value is None or not str(reading.value).strip():
        return Setting(None, "default")
    return Setting(check_reading(str(reading.value), reading.source), reading.source)


def check_files(files: Setting, what: str) -> None:
    for path in files.value:
        if not Path(path).is_file():
            state = "is not a regular file" if Path(path).exists() else "does not exist"
            raise ConfigError(f"{what} file {str(path)!r} {state}", file=files.source)




def check_required(setting: Setting, catalogue: Catalogue) -> None:
    """Raise :class:`ConfigError` naming ``setting``'s source for a name not in the catalogue
    (an alias such as ``dtype.fp8`` is fine: it stands for the capability it resolves to)."""
    for name in setting.value:
        try:
            catalogue.check_name(name)
        except UnknownCapabilityError as exc:  # names the closest capability or alias
            raise ConfigError(str(exc), file=setting.source) from None
