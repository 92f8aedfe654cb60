"""Errors users can act on: every error pytest-devcaps raises on purpose is a :class:`DevcapsError`,
every warning it issues a :class:`DevcapsWarning`.

"Did you mean" is written here once: :func:`closest` finds the suggestion, :func:`suggestion`
words it, :func:`did_you_mean` does both; every message naming the closest valid name uses them.
"""

from __future__ import annotations

import reprlib
from typing import Iterable

class _ShortRepr(reprlib.Repr):
    """reprlib's limits, for dict and list subclasses too (reprlib would repr those in full:
    the YAML loader's LineDict/LineList, which an alias bomb makes huge)."""

    def repr1(self, x: object, level: int) -> str:
        if isinstance(x, dict) and type(x) is not dict:
            return self.repr_dict(x, level)
        if isinstance(x, list) and type(x) is not list:
            return self.repr_list(x, level)
        return super().repr1(x, level)


_SHORT = _ShortRepr()
_SHORT.maxstring = _SHORT.maxother = _SHORT.maxlong = 60
_SHORT.maxlevel = 3
#: The longest text short_repr returns (deep nesting multiplies reprlib's per-level limits).
_SHORT_MAX = 100


def closest(name: str, candidates: Iterable[str], *, cutoff: float = 0.6) -> str | None:
    """The closest valid spelling of ``name``, or None when nothing is close. A short name is
    the closest spelling of the one dotted name it ends (``bf16`` -> ``dtype.bf16``, ``flash`` ->
    ``attention.flash``): difflib alone finds nothing that far apart."""
    names = list(candidates)
    short = short_name_matches(name, names)
    if len(short) == 1:
        return short[0]
    import difflib  # only for a misspelling: difflib costs every pytest session ~3 M instructions

    matches = difflib.get_close_matches(name, names, n=1, cutoff=cutoff)
    return matches[0] if matches else None


def short_name_matches(name: str, candidates: Iterable[str]) -> list[str]:
    """The dotted names whose last part is ``name`` (``bf16`` -> ``['dtype.bf16']``), sorted."""
    return sorted(c for c in candidates if "." in c and c.rpartition(".")[2] == name)


def suggestion(match: str | None) -> str:
    """`` (did you mean 'x'?)`` for a match, an empty string for None: the one wording."""
    return f" (did you mean {match!r}?)" if match else ""


def did_you_mean(name: str, candidates: Iterable[str], *, cutoff: float = 0.6) -> str:
    """`` (did you mean 'x'?)`` naming the closest of ``candidates``, or an empty string."""
    return suggestion(closest(name, candidates, cutoff=cutoff))


def short_repr(value: object) -> str:
    """``repr(value)`` cut to about 60 characters, for error messages quoting user input (a
    400-digit size, a huge list); never raises (ints past Python's 4300-digit ``str`` limit too)."""
    try:
        text = _SHORT.repr(value)
    except Exception:
        return f"<{type(value).__name__} too large to show>"
    return text if len(text) <= _SHORT_MAX else text[:_SHORT_MAX - 3] + "..."


class DevcapsError(Exception):
    """Base class of every error pytest-devcaps raises on purpose."""


class ConfigError(DevcapsError):
    """Bad YAML or a bad option value; names the file (or source), line and key."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 key: str | None = None) -> None:
        self.message = message
        self.file = file
        self.line = line
        self.key = key
        super().__init__(str(self))

    def __str__(self) -> str:
        where = ""
        if self.file:
            where = self.file if self.line is None else f"{self.file}:{self.line}"
            where += ": "
        key = f"{self.key}: " if self.key else ""
        return f"{where}{key}{self.message}"


class UnknownCapabilityError(DevcapsError, KeyError):
    """A capability name that is not in the catalogue."""

    def __init__(self, name: str, known: Iterable[str]) -> None:
        self.name = name
        self.suggestion = closest(name, known)
        super().__init__(name)

    def __str__(self) -> str:
        return f"unknown capability {self.name!r}{suggestion(self.suggestion)}"


class UnknownDeviceError(DevcapsError, LookupError):
    """A device the registry has no answers for (not discovered here, not in the profile)."""

    def __init__(self, device: str, known: Iterable[str]) -> None:
        self.device = device
        self.known = tuple(known)
        super().__init__(str(self))

    def __str__(self) -> str:
        listed = ", ".join(self.known) or "none"
        return f"no device {self.device!r} in this registry; devices: {listed}" \
               f"{did_you_mean(self.device, self.known)}"


class UnsafeFileError(DevcapsError):
    """A path devcaps refuses to read or to replace: not a regular file, too large, or (a cache
    file) not owned by this user or writable by others. ``path`` is the file, ``reason`` why."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(str(self))

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


class DevcapsWarning(UserWarning):
    """A problem pytest-devcaps worked around (a backend whose discovery raised, ...).

    Inside a pytest session the plugin issues these through pytest
    (:class:`pytest_devcaps.session.config_warnings.DevcapsConfigWarning`), so ``-W`` and
    ``filterwarnings`` apply and they appear in the warnings summary.
    """


class DevcapsDeprecationWarning(DevcapsWarning):
    """A deprecated spelling still honoured (an environment variable's old ``DEVCAPS_*`` name);
    the message names what to use instead. A :class:`DevcapsWarning` (a ``UserWarning``), not a
    ``DeprecationWarning``, which Python hides outside ``__main__``: a user who set the old name
    should see that it will stop working."""


class MarkerError(DevcapsError):
    """A devcaps marker or decorator used with arguments it does not take.

    ``marker`` is the marker's name (``requires_memory``); the message says which argument is
    wrong, what was given and what is expected.
    """

    def __init__(self, marker: str, message: str) -> None:
        self.marker = marker
        self.message = message
        super().__init__(str(self))

    def __str__(self) -> str:
        return f"{self.marker}: {self.message}"


class DevcapsValueError(DevcapsError, ValueError):
    """A value devcaps refuses that is not a configuration file's (a level name, a registry
    snapshot of another format or catalogue); still a ``ValueError`` for callers that caught one."""


class DevcapsTypeError(DevcapsError, TypeError):
    """A value of the wrong type given to devcaps (a decorator on a non-callable, arguments that
    cannot be pickled to the ranks); still a ``TypeError`` for callers that caught one."""


class DeviceRuntimeError(DevcapsError, RuntimeError):
    """torch offers no such operation for this device type (no ``synchronize``, no allocator
    statistics...); still a ``RuntimeError`` for callers that caught one."""


class BackendInstallError(DevcapsError):
    """A vendor's torch extension is installed but broken (importing it raised): discovery warns
    with this error's text instead of the device silently disappearing."""
