"""Environment variables of pytest-devcaps: the one table, one prefix, the old names.

:data:`VARIABLES` lists every variable pytest-devcaps reads (each ``ENV_*`` constant here is one;
readers use the constants, never a fresh string). Every one is ``PYTEST_DEVCAPS_<NAME>``. Some
were first spelled without ``PYTEST_`` (``DEVCAPS_DIST_TIMEOUT``, ``DEVCAPS_DYNAMO_CACHE``...):
the old name still works and gives a :class:`~pytest_devcaps.errors.DevcapsDeprecationWarning`
naming the new one; both set to different values is a :class:`~pytest_devcaps.errors.ConfigError`
naming both (which one would win is not something a user should have to guess).

A set variable with the prefix that is not in the table (``PYTEST_DEVCAPS_HARDWRE``, or
``pytest_devcaps_hardware``, which POSIX keeps apart) is a usage error naming the closest valid
name (:func:`check_names`): pytest's configure, the ``devcaps`` command and the unittest bridge
call it before reading anything, so a typo never silently does nothing. The old prefix is not
judged that way: only the old names in :data:`RENAMED` are ours; any other ``DEVCAPS_*`` variable
may belong to another tool, and refusing it would break a session for a name we never owned.

Standard library and errors only; importing it imports neither (every pytest session asks
:func:`any_set`): errors are imported where one is raised, and the records are frozen slotted
classes written out (not ``typing.NamedTuple`` nor a dataclass, whose class factories cost: two
NamedTuple classes here were 3.4 M instructions, 7% of the plugin's whole cost in a 300-test
torch-free session, measured with callgrind).
"""

from __future__ import annotations

import os
from typing import Iterable, Mapping

PREFIX = "PYTEST_DEVCAPS_"
#: The prefix the renamed variables had before (only the names in :data:`RENAMED` are ours).
OLD_PREFIX = "DEVCAPS_"

ENV_DEVICES = "PYTEST_DEVCAPS_DEVICES"
ENV_EXCEPT = "PYTEST_DEVCAPS_EXCEPT"
ENV_OVERRIDES = "PYTEST_DEVCAPS_OVERRIDES"
ENV_PROFILE = "PYTEST_DEVCAPS_PROFILE"
ENV_REQUIRE = "PYTEST_DEVCAPS_REQUIRE"
ENV_PROBE_TIMEOUT = "PYTEST_DEVCAPS_PROBE_TIMEOUT"
ENV_HARDWARE = "PYTEST_DEVCAPS_HARDWARE"
ENV_HARDWARE_READING = "PYTEST_DEVCAPS_HARDWARE_READING"
ENV_EXPECT = "PYTEST_DEVCAPS_EXPECT"
ENV_EXPECT_STRICT = "PYTEST_DEVCAPS_EXPECT_STRICT"
ENV_CACHE_DIR = "PYTEST_DEVCAPS_CACHE_DIR"
ENV_EMU_DEVICES = "PYTEST_DEVCAPS_EMU_DEVICES"
ENV_EMU_CACHE_DIR = "PYTEST_DEVCAPS_EMU_CACHE_DIR"
ENV_EMU_MEMORY = "PYTEST_DEVCAPS_EMU_MEMORY"
ENV_DIST_TIMEOUT = "PYTEST_DEVCAPS_DIST_TIMEOUT"
ENV_DIST_PG_TIMEOUT = "PYTEST_DEVCAPS_DIST_PG_TIMEOUT"
ENV_DIST_SHARE_DEVICES = "PYTEST_DEVCAPS_DIST_SHARE_DEVICES"
ENV_DIST_REUSE = "PYTEST_DEVCAPS_DIST_REUSE"
ENV_DYNAMO_ORDER = "PYTEST_DEVCAPS_DYNAMO_ORDER"
ENV_DYNAMO_CACHE = "PYTEST_DEVCAPS_DYNAMO_CACHE"


def _fields(record: object) -> tuple[object, ...]:
    return tuple(getattr(record, name) for name in record.__slots__)  # type: ignore[attr-defined]


def _frozen(record: object, *args: object) -> None:
    raise AttributeError(f"{type(record).__name__} is frozen")


def _eq(record: object, other: object) -> bool:
    return type(other) is type(record) and _fields(other) == _fields(record)


def _hash(record: object) -> int:
    return hash(_fields(record))


def _repr(record: object) -> str:
    pairs = ", ".join(f"{name}={value!r}" for name, value in zip(record.__slots__, _fields(record)))  # type: ignore[attr-defined]
    return f"{type(record).__name__}({pairs})"


_set = object.__setattr__


class Variable:
    """One environment variable: its name, what it means (one line) and its old name, if any."""

    __slots__ = ("name", "meaning", "old")
    name: str
    meaning: str
    old: str | None

    def __init__(self, name: str, meaning: str, old: str | None = None) -> None:
        _set(self, "name", name)
        _set(self, "meaning", meaning)
        _set(self, "old", old)

    __setattr__ = __delattr__ = _frozen
    __eq__, __hash__, __repr__ = _eq, _hash, _repr


def _table(*variables: Variable) -> Mapping[str, Variable]:
    return {variable.name: variable for variable in variables}


#: Every variable pytest-devcaps reads, by name (the README's "Environment variables" lists these).
VARIABLES: Mapping[str, Variable] = _table(
    Variable(ENV_DEVICES, "device types to run device tests on (--devcaps-devices)"),
    Variable(ENV_EXCEPT, "device types to leave out (--devcaps-except)"),
    Variable(ENV_OVERRIDES, "capability override YAML files, os.pathsep-separated "
                            "(--devcaps-overrides)"),
    Variable(ENV_PROFILE, "plan against a device profile instead of running (--devcaps-profile)"),
    Variable(ENV_REQUIRE, "capabilities this runner must have: a skip for one is an error "
                          "(--devcaps-require)"),
    Variable(ENV_PROBE_TIMEOUT, "seconds one empirical probe may take (--devcaps-probe-timeout)"),
    Variable(ENV_HARDWARE, "hardware classes to run; others are deselected (--devcaps-hardware)"),
    Variable(ENV_HARDWARE_READING, "how a declared hardware class is read: devcaps or pytorch "
                                   "(--devcaps-hardware-reading)"),
    Variable(ENV_EXPECT, "expectations YAML files (known failures, skips, flaky and must-pass "
                         "tests per device), os.pathsep-separated (--devcaps-expect)"),
    Variable(ENV_EXPECT_STRICT, "1: a stale expectations entry fails the run "
                                "(--devcaps-expect-strict)"),
    Variable(ENV_CACHE_DIR, "where the probe cache lives (default $XDG_CACHE_HOME/pytest-devcaps)"),
    Variable(ENV_EMU_DEVICES, "how many emu devices each process gets (unset: no emu backend)"),
    Variable(ENV_EMU_CACHE_DIR, "where the emu extension is built (default emu/ in the cache)"),
    Variable(ENV_EMU_MEMORY, "each emu device's memory, e.g. 4GiB (default: half the host's RAM, "
                             "shared by the devices)"),
    Variable(ENV_DIST_TIMEOUT, "watchdog seconds per distributed world (default 240)",
             "DEVCAPS_DIST_TIMEOUT"),
    Variable(ENV_DIST_PG_TIMEOUT, "process group collective timeout in seconds (default 60)",
             "DEVCAPS_DIST_PG_TIMEOUT"),
    Variable(ENV_DIST_SHARE_DEVICES, "1: ranks of a world may share one accelerator",
             "DEVCAPS_DIST_SHARE_DEVICES"),
    Variable(ENV_DIST_REUSE, "0: a fresh distributed world for every call (default: reuse)",
             "DEVCAPS_DIST_REUSE"),
    Variable(ENV_DYNAMO_ORDER, "the Dynamo suite's test order: reversed or shuffle:SEED",
             "DEVCAPS_DYNAMO_ORDER"),
    Variable(ENV_DYNAMO_CACHE, "the Dynamo suite's Inductor cache: shared (default) or fresh",
             "DEVCAPS_DYNAMO_CACHE"),
)

#: New name -> the old name it replaces (still read, with a deprecation warning).
RENAMED: Mapping[str, str] = {v.name: v.old for v in VARIABLES.values() if v.old is not None}


def unknown_names(environ: Iterable[str]) -> list[str]:
    """The names in ``environ`` with our prefix (in any case) that are not in :data:`VARIABLES`,
    sorted; an old ``DEVCAPS_*`` name is never among them (see the module's docstring)."""
    return sorted(name for name in environ
                  if name.upper().startswith(PREFIX) and name not in VARIABLES)


#: Variables no session setting is made from: each is read where it is used (the probe cache,
#: the emu backend, the Dynamo suite), never by a pytest session's configure.
READ_WHERE_USED = frozenset({ENV_CACHE_DIR, ENV_EMU_DEVICES, ENV_EMU_CACHE_DIR, ENV_EMU_MEMORY,
                             ENV_DYNAMO_ORDER, ENV_DYNAMO_CACHE})


def configure_reads(environ: Iterable[str]) -> bool:
    """Whether ``environ`` names a variable a pytest session reads or refuses at configure time:
    a name with our prefix (in any case, a typo included) or an old name of :data:`RENAMED`,
    unless it is (the old name of) one of :data:`READ_WHERE_USED`. A string scan: a session
    where it is False reads no variable of ours until something uses devcaps."""
    old = {name for new, name in RENAMED.items() if new not in READ_WHERE_USED}
    return any((name.upper().startswith(PREFIX) and name not in READ_WHERE_USED) or name in old
               for name in environ)


def closest_name(name: str) -> str | None:
    """The table's name closest to ``name``, compared after the prefix (every name shares it, so
    whole names would all look alike) and in upper case; None when nothing is close."""
    from pytest_devcaps.errors import closest

    suffixes = {known[len(PREFIX):]: known for known in VARIABLES}
    match = closest(name.upper()[len(PREFIX):], suffixes)
    return None if match is None else suffixes[match]


def check_names(environ: Mapping[str, str] | None = None) -> None:
    """Refuse a set ``PYTEST_DEVCAPS_*`` variable that is not in :data:`VARIABLES`: a
    :class:`ConfigError` naming each one and the closest valid name (a scan of ``environ``,
    default ``os.environ``: microseconds, no imports)."""
    unknown = unknown_names(os.environ if environ is None else environ)
    if not unknown:
        return
    from pytest_devcaps.errors import ConfigError, suggestion

    named = ", ".join(f"{name}{suggestion(closest_name(name))}" for name in unknown)
    plural = "s" if len(unknown) > 1 else ""
    raise ConfigError(f"unknown environment variable{plural} {named}: pytest-devcaps reads no "
                      f"such variable; fix the name or unset it (README, 'Environment variables')")


class EnvValue:
    """A variable's value and the name it was found under (the old name, when that was set)."""

    __slots__ = ("value", "variable")
    value: str
    variable: str

    def __init__(self, value: str, variable: str) -> None:
        _set(self, "value", value)
        _set(self, "variable", variable)

    __setattr__ = __delattr__ = _frozen
    __eq__, __hash__, __repr__ = _eq, _hash, _repr


def lookup(name: str, environ: Mapping[str, str] | None = None) -> EnvValue | None:
    """``name`` (a ``PYTEST_DEVCAPS_*`` variable) from ``environ`` (default ``os.environ``), or
    its old name with a deprecation warning; None when neither is set. Both set to different
    values: :class:`ConfigError` naming both."""
    env = os.environ if environ is None else environ
    old = RENAMED.get(name)
    if old is None or old not in env:
        return EnvValue(env[name], name) if name in env else None
    import warnings

    from pytest_devcaps.errors import ConfigError, DevcapsDeprecationWarning

    if name in env:
        if env[name] != env[old]:
            raise ConfigError(f"{name}={env[name]!r} and its old name {old}={env[old]!r} are both "
                              f"set and differ; unset {old}", file=name)
        return EnvValue(env[name], name)
    warnings.warn(DevcapsDeprecationWarning(
        f"{old} is deprecated; set {name} instead (one prefix, PYTEST_DEVCAPS_, for every "
        "pytest-devcaps variable)"), stacklevel=2)
    return EnvValue(env[old], old)


def get(name: str, default: str = "", environ: Mapping[str, str] | None = None) -> str:
    """The value of ``name`` (or its old name, see :func:`lookup`), else ``default``."""
    found = lookup(name, environ)
    return default if found is None else found.value
