"""Reading one report file into a :class:`Source`: what a merge needs, checked, in one shape.

Reads ``pytest --devcaps-json`` reports (run and plan mode), ``devcaps check --json`` (format 1,
and the format-0 list of suites with counts), ``devcaps probe --json``. A problem is a
:class:`ReportError` naming the file and key; a fleet report is refused (merge the reports it was
made from). Standard library only.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from pytest_devcaps.errors import DevcapsValueError
from pytest_devcaps.model import DeviceIdentity
from pytest_devcaps.report.formats import FORMATS, ReportError, classify_outcome

MAX_BYTES = 256 * 2**20
"""The largest report file read (a fleet of thousands of ranks is a few MB)."""
MAX_DEPTH = 64
"""The deepest nesting of objects and lists a report may have (reports nest about 6 deep)."""
MAX_INT_DIGITS = 40
"""The longest integer literal read (Python refuses over 4,300 digits with a ValueError)."""
UNKNOWN_HOST = "(unknown host)"
COLLECTION_ERROR_ID = "(collection)"
"""The test id of a collection error that names no file (pytest's session-level collect report)."""
NO_DEVICE = "-"
"""The device key of tests that ran on no device (a test without the ``device`` fixture)."""
DEFAULT_SUITE = "pytest"
"""The suite name of a pytest report that names none (``SUITE=PATH`` on the command line names it)."""


@dataclass(frozen=True)
class TestEntry:
    suite: str
    device: str
    """The device key on the source's host (``cuda:0``), or :data:`NO_DEVICE`."""
    nodeid: str
    outcome: str
    """An outcome class (``formats.classify_outcome``)."""


@dataclass(frozen=True)
class Source:
    """One report, as the merge sees it."""

    file: str
    kind: str
    format: int
    host: str
    rank: int | None
    world_size: int | None
    created: str | None
    devcaps_version: str | None
    devices: tuple[Mapping[str, Any], ...]
    """Device identities as written (``DeviceIdentity.to_dict``)."""
    capabilities: tuple[Mapping[str, Any], ...]
    """Capability records: capability, device (key), level, reason, source."""
    tests: tuple[TestEntry, ...]
    counts: tuple[tuple[str, str, Mapping[str, int]], ...] = ()
    """(suite, device key, outcome counts) for reports that carry counts but no tests (format 0)."""
    exitstatus: int | None = None
    """A pytest report's exit status (None: a probe, a check, a report too old to carry one)."""
    suite_exits: tuple[tuple[str, int, int], ...] = ()
    """A check report's (suite, exit code, tests or counted outcomes) for each suite."""
    passed: bool | None = None
    """A check report's own verdict."""
    run_id: str | None = None
    """The launcher's run id (torchrun's ``TORCHELASTIC_RUN_ID``): the ranks of one world."""
    failed_peers: tuple[int, ...] = ()
    """Rank 0 of a launched world: the other ranks that failed."""
    silent_peers: tuple[int, ...] = ()
    """Rank 0 of a launched world: the other ranks that never reported (died or hung)."""
    suite: str | None = None
    """A pytest report's suite name (its tests' suite)."""

    def describe(self) -> dict[str, Any]:
        """The source as the fleet report lists it."""
        return {"file": self.file, "kind": self.kind, "format": self.format, "host": self.host,
                "rank": self.rank, "world_size": self.world_size, "created": self.created,
                "devcaps_version": self.devcaps_version, "exitstatus": self.exitstatus,
                "suites": sorted({t.suite for t in self.tests} | {c[0] for c in self.counts})}


def parse_argument(argument: str) -> tuple[str, str | None]:
    """``[SUITE=]PATH`` from the command line: the path, and the suite name it gives a pytest
    report (None when not given). A path that exists as written is never split."""
    suite, sep, path = argument.partition("=")
    if sep and suite and "/" not in suite and os.sep not in suite and not os.path.exists(argument):
        return path, suite
    return argument, None


def load_source(path: str, suite: str | None = None) -> Source:
    """Read and check one report file."""
    return source_from_document(read_json(path), path, suite)


class _Refused(DevcapsValueError):
    """A JSON literal a report may not hold (raised from the decoder's hooks)."""


def _int_literal(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _Refused(f"an integer of {len(text.lstrip('-'))} digits (at most "
                       f"{MAX_INT_DIGITS} are read)")
    return int(text)


def _float_literal(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _Refused(f"the number {text[:40]} is out of range")
    return value


def _constant(text: str) -> Any:
    raise _Refused(f"{text} is not JSON")


def read_json(path: str) -> Any:
    """One JSON document from ``path``, within limits: :data:`MAX_BYTES`, :data:`MAX_DEPTH`,
    :data:`MAX_INT_DIGITS`, finite numbers only. Every problem is a :class:`ReportError`."""
    if not os.path.isfile(path):
        raise ReportError("not a readable file" if os.path.exists(path) else "no such file",
                          file=path)
    try:
        if os.path.getsize(path) > MAX_BYTES:
            raise ReportError(f"larger than {MAX_BYTES // 2**20} MiB: not read", file=path)
        with open(path, encoding="utf-8") as handle:
            document = json.loads(handle.read(), parse_int=_int_literal,
                                  parse_float=_float_literal, parse_constant=_constant)
    except json.JSONDecodeError as error:
        raise ReportError(f"not JSON: {error.msg}", file=path, line=error.lineno) from None
    except _Refused as error:
        raise ReportError(f"not read: {error}", file=path) from None
    except RecursionError:
        raise ReportError(f"nested deeper than {MAX_DEPTH} levels: not read", file=path) from None
    except (OSError, UnicodeDecodeError, ValueError, MemoryError) as error:
        raise ReportError(f"cannot be read: {error}", file=path) from None
    _check_depth(document, path)
    return document


def _check_depth(document: Any, path: str) -> None:
    stack = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > MAX_DEPTH:
                raise ReportError(f"nested deeper than {MAX_DEPTH} levels: not read", file=path)
            stack.extend((item, depth + 1)
                         for item in (value.values() if isinstance(value, dict) else value))


def source_from_document(document: Any, path: str, suite: str | None = None) -> Source:
    """A :class:`Source` from a parsed document (``path`` names it in errors)."""
    if isinstance(document, list):
        return _legacy_check(document, path)
    if not isinstance(document, dict):
        raise ReportError(f"expected a devcaps report (a JSON object), got {_type(document)}",
                          file=path)
    kind = _kind(document, path)
    version = document.get("format")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ReportError(f"expected a format version (an int >= 1), got {version!r}", file=path,
                          key="format")
    if version > FORMATS[kind]:
        raise ReportError(f"{kind} report format {version} is newer than this pytest-devcaps "
                          f"reads (up to {FORMATS[kind]}); upgrade pytest-devcaps to merge it",
                          file=path, key="format")
    if kind == "fleet":
        raise ReportError("already a fleet report: merge the reports it was made from",
                          file=path, key="kind")
    return _source(document, path, kind, version, suite)


def _kind(document: Mapping[str, Any], path: str) -> str:
    kind = document.get("kind")
    if kind is None and "tests" in document and "mode" in document:
        return "pytest"  # written before reports named their kind
    if kind not in FORMATS:
        raise ReportError(f"expected kind {', '.join(map(repr, FORMATS))}, got {kind!r}",
                          file=path, key="kind")
    return str(kind)


def _source(document: Mapping[str, Any], path: str, kind: str, version: int,
            suite: str | None) -> Source:
    plan = kind == "pytest" and document.get("mode") == "plan"
    host = _text(document, "host", path) or UNKNOWN_HOST
    if plan:  # a plan's devices are a profile's, not this host's
        profile = (document.get("meta") or {}).get("profile") or "profile"
        host = f"plan:{profile}"
    parts: dict[str, Any] = {"tests": ()}
    if kind == "pytest":
        parts = _pytest_parts(document, path, version, suite)
    elif kind == "check":
        parts = _check_parts(document, path)
    rank, world_size = _rank(document, path)
    return Source(
        file=path, kind="plan" if plan else kind, format=version, host=host,
        rank=rank, world_size=world_size, created=_text(document, "created", path),
        devcaps_version=_text(document, "devcaps_version", path),
        devices=tuple(_devices(_list(document, "devices", path), path)),
        capabilities=tuple(_records(_list(document, "capabilities", path), path)),
        run_id=_text(document, "run_id", path), **parts)


def _rank(document: Mapping[str, Any], path: str) -> tuple[int | None, int | None]:
    """``rank`` and ``world_size``: both or neither, a rank of the world (``0 <= rank <
    world_size``); anything else is refused, as the schema refuses it."""
    rank, world_size = _int(document, "rank", path), _int(document, "world_size", path)
    if (rank is None) != (world_size is None):
        raise ReportError(f"rank {rank!r} with world_size {world_size!r}: a report names both "
                          "or neither", file=path, key="rank" if rank is None else "world_size")
    if world_size is not None and world_size < 1:
        raise ReportError(f"world_size {world_size} is not a world (at least 1)", file=path,
                          key="world_size")
    if rank is not None and world_size is not None and not 0 <= rank < world_size:
        raise ReportError(f"rank {rank} is not a rank of world_size {world_size} (0 to "
                          f"{world_size - 1})", file=path, key="rank")
    return rank, world_size


def _pytest_parts(document: Mapping[str, Any], path: str, version: int,
                  suite: str | None) -> dict[str, Any]:
    """A pytest report's tests (its collection errors among them, as errors), exit status and,
    on rank 0 of a launched world, the peers that failed or never reported."""
    name = _text(document, "suite", path) or suite or DEFAULT_SUITE
    tests = _tests(_list(document, "tests", path), name, path, "tests")
    for i, entry in enumerate(_list(document, "collection_errors", path)):
        nodeid = _text(_mapping(entry, f"collection_errors[{i}]", path), "nodeid", path,
                       f"collection_errors[{i}]")
        tests.append(TestEntry(name, NO_DEVICE, nodeid or COLLECTION_ERROR_ID, "error"))
    exitstatus = _int(document, "exitstatus", path)
    if exitstatus is None and version >= 2:
        raise ReportError("expected the session's exit status (an int), got None", file=path,
                          key="exitstatus")
    peers = _mapping(document.get("peers") or {}, "peers", path)
    return {"tests": tuple(tests), "exitstatus": exitstatus, "suite": name,
            "failed_peers": _ranks(peers, "failed", path),
            "silent_peers": _ranks(peers, "silent", path)}


def _ranks(peers: Mapping[str, Any], key: str, path: str) -> tuple[int, ...]:
    ranks = _list(peers, key, path, "peers")
    if not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in ranks):
        raise ReportError(f"expected ranks (ints >= 0), got {ranks!r}", file=path,
                          key=f"peers.{key}")
    return tuple(ranks)


def _check_parts(document: Mapping[str, Any], path: str) -> dict[str, Any]:
    """A check report's tests, each suite's exit code and its own verdict."""
    tests: list[TestEntry] = []
    exits = []
    for i, entry in enumerate(_list(document, "suites", path)):
        where = f"suites[{i}]"
        name = _text(_mapping(entry, where, path), "suite", path, where) or f"suite {i}"
        found = _tests(_list(entry, "tests", path, where), name, path, f"{where}.tests")
        tests += found
        exits.append((name, _exit_code(entry, path, where), len(found)))
    passed = document.get("passed")
    if passed is not None and not isinstance(passed, bool):
        raise ReportError(f"expected true or false, got {_type(passed)}", file=path, key="passed")
    return {"tests": tuple(tests), "suite_exits": tuple(exits), "passed": passed}


def _exit_code(entry: Mapping[str, Any], path: str, where: str) -> int:
    code = entry.get("exit_code")
    if isinstance(code, bool) or not isinstance(code, int):
        raise ReportError(f"expected the suite's exit code (an int), got {_type(code)}",
                          file=path, key=f"{where}.exit_code")
    return code


def _legacy_check(document: list[Any], path: str) -> Source:
    """Format 0 of ``devcaps check --json``: ``[{suite, exit_code, seconds, counts}]``."""
    counts, exits = [], []
    for i, entry in enumerate(document):
        where = f"[{i}]"
        entry = _mapping(entry, where, path)
        name = _text(entry, "suite", path, where) or f"suite {i}"
        counted = 0
        for device, per in _mapping(entry.get("counts", {}), f"{where}.counts", path).items():
            per = _mapping(per, f"{where}.counts.{device}", path)
            if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                       for n in per.values()):
                raise ReportError("expected counts (ints)", file=path, key=f"{where}.counts.{device}")
            counts.append((name, str(device), dict(per)))
            counted += sum(per.values())
        exits.append((name, _exit_code(entry, path, where), counted))
    return Source(file=path, kind="check", format=0, host=UNKNOWN_HOST, rank=None, world_size=None,
                  created=None, devcaps_version=None, devices=(), capabilities=(), tests=(),
                  counts=tuple(counts), suite_exits=tuple(exits))


def _tests(entries: Sequence[Any], suite: str, path: str, where: str) -> list[TestEntry]:
    tests = []
    for i, entry in enumerate(entries):
        entry = _mapping(entry, f"{where}[{i}]", path)
        nodeid = entry.get("nodeid")
        if not isinstance(nodeid, str) or not nodeid:
            raise ReportError(f"expected a test id, got {nodeid!r}", file=path,
                              key=f"{where}[{i}].nodeid")
        device = entry.get("device")
        # an error in teardown fails the test in a fleet's eyes (pytest counts it besides the
        # outcome; a fleet counts each test once)
        outcome = "error" if entry.get("teardown") == "error" else classify_outcome(entry)
        tests.append(TestEntry(suite, str(device) if device else NO_DEVICE, nodeid, outcome))
    return tests


def _devices(entries: Sequence[Any], path: str) -> list[Mapping[str, Any]]:
    devices: list[Mapping[str, Any]] = []
    for i, entry in enumerate(entries):
        entry = _mapping(entry, f"devices[{i}]", path)
        try:
            key = DeviceIdentity.from_dict(entry).key
        except (KeyError, TypeError, ValueError) as error:
            raise ReportError(f"not a device identity ({error!r})", file=path,
                              key=f"devices[{i}]") from None
        devices.append({**entry, "key": key})
    return devices


_RECORD_KEYS = ("capability", "device", "level")


def _records(entries: Sequence[Any], path: str) -> list[Mapping[str, Any]]:
    records: list[Mapping[str, Any]] = []
    for i, entry in enumerate(entries):
        entry = _mapping(entry, f"capabilities[{i}]", path)
        for key in _RECORD_KEYS:
            if not isinstance(entry.get(key), str):
                raise ReportError(f"expected a string, got {entry.get(key)!r}", file=path,
                                  key=f"capabilities[{i}].{key}")
        records.append({"capability": entry["capability"], "device": entry["device"],
                        "level": entry["level"], "reason": str(entry.get("reason", "")),
                        "source": str(entry.get("source", ""))})
    return records


def _type(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", type(None): "null"}.get(
        type(value), type(value).__name__)


def _mapping(value: Any, where: str, path: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ReportError(f"expected an object, got {_type(value)}", file=path, key=where)
    return value


def _list(document: Mapping[str, Any], key: str, path: str, where: str = "") -> list[Any]:
    value = document.get(key, [])
    if not isinstance(value, list):
        raise ReportError(f"expected a list, got {_type(value)}", file=path,
                          key=f"{where}.{key}" if where else key)
    return value


def _text(document: Mapping[str, Any], key: str, path: str, where: str = "") -> str | None:
    value = document.get(key)
    if value is not None and not isinstance(value, str):
        raise ReportError(f"expected a string, got {_type(value)}", file=path,
                          key=f"{where}.{key}" if where else key)
    return value


def _int(document: Mapping[str, Any], key: str, path: str) -> int | None:
    value = document.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise ReportError(f"expected an int, got {_type(value)}", file=path, key=key)
    return value
