"""On-disk cache of probe outcomes, keyed by a fingerprint of everything that can change them.

A cache file is believed only when it is a regular file this user owns and nobody else may
write, in a directory of the same kind (a shared ``PYTEST_DEVCAPS_CACHE_DIR`` must not let one
user decide another's answers): a refused directory is neither read nor written, and the
probes run as without a cache, the report header saying why. Cache files are private (0600).
A file of the wrong shape (``[]``, ``null``, entries missing fields) is a miss for what it
lacks, never a crash: the missing answers are probed again and the file rewritten. Only real
answers are stored; a transient outcome (a timeout, a failed runner) is asked again next run.
"""

from __future__ import annotations

__all__ = ["CACHE_ENV", "default_cache_dir"]  # where the cache lives is decided in _util.files

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from pytest_devcaps.errors import DevcapsError
from pytest_devcaps._util.files import (
    CACHE_ENV,
    default_cache_dir,
    directory_refusal,
    read_regular_file,
    write_atomic,
)
from pytest_devcaps.model import Level, ProbeOutcome

_FORMAT = 1


def fingerprint(parts: Mapping[str, Any]) -> str:
    """A stable hash of plain data (torch version, device identities, catalogue digest...)."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:32]


@dataclass(frozen=True)
class CacheLookup:
    """What the cache holds for one key: the valid outcomes (maybe none) and, when the file
    was refused or partly malformed, why (``problem``, for the report header)."""

    outcomes: dict[str, ProbeOutcome] = field(default_factory=dict)
    problem: str | None = None


class ProbeCache:
    """Probe outcomes per device fingerprint, one JSON file each."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory if directory is not None else default_cache_dir()

    def _path(self, key: str) -> Path:
        return self.directory / f"probes-{key}.json"

    def load(self, key: str) -> CacheLookup:
        """The valid cached outcomes for ``key``; an absent file is an empty lookup."""
        path = self._path(key)
        refusal = directory_refusal(self.directory)
        if refusal is not None:
            return CacheLookup(problem=f"{path.name} not read: {refusal}")
        try:
            data = json.loads(read_regular_file(path, trusted=True))
        except FileNotFoundError:
            return CacheLookup()
        except DevcapsError as exc:  # refused: another user's file, writable by others...
            return CacheLookup(problem=f"{path.name} not read: {getattr(exc, 'reason', exc)}")
        except OSError as exc:
            return CacheLookup(problem=f"{path.name} unreadable: {exc.strerror or exc}")
        except (ValueError, RecursionError):
            return CacheLookup(problem=f"{path.name} is not JSON")
        if not (isinstance(data, dict) and isinstance(data.get("outcomes"), dict)):
            return CacheLookup(problem=f"{path.name} has the wrong shape")
        if data.get("format") != _FORMAT:
            return CacheLookup()  # another version's format: a plain miss
        outcomes = {}
        for capability, entry in data["outcomes"].items():
            outcome = _outcome(entry)
            if outcome is not None:
                outcomes[capability] = outcome
        dropped = len(data["outcomes"]) - len(outcomes)
        problem = f"{path.name}: {dropped} malformed entries" if dropped else None
        return CacheLookup(outcomes, problem)

    def store(self, key: str, outcomes: Mapping[str, ProbeOutcome]) -> None:
        """Save the non-transient outcomes; a read-only or full disk (or a path that is not
        a regular file) only costs the next run a re-probe."""
        payload = {
            "format": _FORMAT,
            "outcomes": {
                cap: {"level": outcome.level.value, "reason": outcome.reason}
                for cap, outcome in outcomes.items() if not outcome.transient
            },
        }
        if directory_refusal(self.directory) is not None:
            return  # load() said why; nothing of ours goes where others may write
        try:
            write_atomic(self._path(key), json.dumps(payload, indent=1, sort_keys=True),
                         private=True)
        except (OSError, DevcapsError):
            pass


def _outcome(entry: Any) -> ProbeOutcome | None:
    """One cached entry, or None when it is not ``{"level": <level>, "reason": <text>}``."""
    if not (isinstance(entry, dict) and isinstance(entry.get("reason"), str)):
        return None
    try:
        return ProbeOutcome(Level(entry.get("level")), entry["reason"])
    except ValueError:
        return None
