"""On-disk cache of probe outcomes, keyed by a fingerprint of everything that can change them."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Mapping

from pytest_devcaps.files import write_atomic
from pytest_devcaps.model import Level, ProbeOutcome

CACHE_ENV = "PYTEST_DEVCAPS_CACHE_DIR"
_FORMAT = 1


def default_cache_dir() -> Path:
    """``$PYTEST_DEVCAPS_CACHE_DIR``, else ``$XDG_CACHE_HOME/pytest-devcaps``, else ``~/.cache/...``."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pytest-devcaps"


def fingerprint(parts: Mapping[str, Any]) -> str:
    """A stable hash of plain data (torch version, device identities, catalogue digest...)."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:32]


class ProbeCache:
    """Probe outcomes per device fingerprint, one JSON file each."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory if directory is not None else default_cache_dir()

    def _path(self, key: str) -> Path:
        return self.directory / f"probes-{key}.json"

    def load(self, key: str) -> dict[str, ProbeOutcome] | None:
        """The cached outcomes, or None on a miss (absent, unreadable or of another format)."""
        try:
            data = json.loads(self._path(key).read_text(encoding="utf-8"))
            if data.get("format") != _FORMAT:
                return None
            return {
                cap: ProbeOutcome(Level(entry["level"]), entry["reason"])
                for cap, entry in data["outcomes"].items()
            }
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def store(self, key: str, outcomes: Mapping[str, ProbeOutcome]) -> None:
        """Save outcomes; a read-only or full disk only costs the next run a re-probe."""
        payload = {
            "format": _FORMAT,
            "outcomes": {
                cap: {"level": outcome.level.value, "reason": outcome.reason}
                for cap, outcome in outcomes.items()
            },
        }
        try:
            write_atomic(self._path(key), json.dumps(payload, indent=1, sort_keys=True))
        except OSError:
            pass
