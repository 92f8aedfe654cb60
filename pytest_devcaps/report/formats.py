"""The JSON documents pytest-devcaps writes: their kinds, format versions and shared fields.

One source for each format version (the JSON Schemas in ``schemas/`` carry the same numbers,
``tests/report`` checks it). A reader accepts every format up to the version it knows and
refuses a newer one by name. Standard library only (the CLI must not import pytest or torch).

Kinds: ``pytest`` (``pytest --devcaps-json``), ``check`` (``devcaps check --json``), ``probe``
(``devcaps probe --json``) and ``fleet`` (``devcaps report merge``).
"""

from __future__ import annotations

import time
from typing import Any, Mapping

from pytest_devcaps.errors import ConfigError
from pytest_devcaps.version import __version__

PYTEST_FORMAT = 2
"""``pytest --devcaps-json``: devices, every capability record, per-test outcomes.
2: outcomes are pytest's terminal categories (xfailed, xpassed), ``teardown``, ``reruns``,
``summary`` and ``collection_errors`` (1 had none of them; it is still read)."""
CHECK_FORMAT = 1
"""``devcaps check --json``: the capability records plus each suite's per-test outcomes.
Format 0 was a bare list of suites with counts (pytest-devcaps 0.1.0); it is still read."""
PROBE_FORMAT = 1
"""``devcaps probe --json``: devices and capability records."""
FLEET_FORMAT = 2
"""``devcaps report merge``: many reports as one document. 2: each report's exit status and
why it failed, the ranks of each launched world, ``problems`` and the verdict ``passed`` (1
had none of them, so a failed run could look green: it is not rendered)."""

FORMATS: Mapping[str, int] = {"pytest": PYTEST_FORMAT, "check": CHECK_FORMAT,
                              "probe": PROBE_FORMAT, "fleet": FLEET_FORMAT}

TEST_OUTCOMES = ("passed", "failed", "skipped", "error", "xfailed", "xpassed", "would-run",
                 "would-skip")
"""A test entry's ``outcome`` (or null: it never finished): pytest's terminal categories and a
plan's two (the schema's ``test.outcome`` enum; ``tests/report`` checks they agree). A report
with any other outcome is refused: ``"FAILED"`` must not merge as a pass."""

OUTCOME_ORDER = ("error", "failed", "xpassed", "passed", "xfailed", "skipped-by-capability",
                 "skipped-other", "would-run", "would-skip")
"""Outcome classes, worst first: when reports disagree about one test, the worst one counts."""


class ReportError(ConfigError):
    """A report that cannot be read: names the file, the key and what was expected."""


def stamp(kind: str) -> dict[str, Any]:
    """The fields every document of ``kind`` starts with: format, kind, when, where, by what."""
    from pytest_devcaps._util.host import host_name  # the one host name every report records

    return {"format": FORMATS[kind], "kind": kind, "created": utc_now(),
            "host": host_name(), "devcaps_version": __version__}


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def classify_outcome(test: Mapping[str, Any]) -> str:
    """The outcome class of one test entry: a skip is ``skipped-by-capability`` when the test
    recorded what it was missing, else ``skipped-other``; no outcome at all counts as an error."""
    outcome = str(test.get("outcome") or "error")
    if outcome == "skipped":
        return "skipped-by-capability" if test.get("missing") else "skipped-other"
    return outcome
