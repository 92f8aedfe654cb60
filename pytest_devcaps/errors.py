"""Errors users can act on."""

from __future__ import annotations

import difflib
from typing import Iterable


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The closest valid spelling of ``name``, or None when nothing is close."""
    matches = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return matches[0] if matches else None


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` or an empty string."""
    match = closest(name, candidates)
    return f" (did you mean {match!r}?)" if match else ""


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
        hint = f" (did you mean {self.suggestion!r}?)" if self.suggestion else ""
        return f"unknown capability {self.name!r}{hint}"
