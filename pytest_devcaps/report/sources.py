"""Reading one report file into a :class:`Source`: what a merge needs, checked, in one shape.

Reads ``pytest --devcaps-json`` reports (run and plan mode), ``devcaps check --json`` (format 1,
and the format-0 list of suites with counts), ``devcaps probe --json``. Nothing in a report is
believed before it is checked: the file within limits (size, values, nesting, string lengths),
a report of the current format against its kind's JSON Schema, and every value the merge keeps
(outcomes, levels, device types, keys and indices, names) from its closed set or of its type,
whatever the format. A problem is a :class:`ReportError` naming the file and key; a fleet report
is refused (merge the reports it was made from). Standard library only.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from pytest_devcaps._util.files import read_regular_file
from pytest_devcaps.errors import DevcapsValueError, UnsafeFileError, did_you_mean, short_repr
from pytest_devcaps.model import DeviceIdentity, Level
from pytest_devcaps.report.formats import (FORMATS, OUTCOME_ORDER, TEST_OUTCOMES, ReportError,
                                           classify_outcome)
from pytest_devcaps.report.validate import SchemaMismatch, validate_kind

MAX_BYTES = 256 * 2**20
"""The largest report file read (a fleet of thousands of ranks is a few MB)."""
MAX_VALUES = 16_000_000
"""The most JSON values (objects, lists, strings, numbers) a report may hold, counted on the
bytes before parsing (commas and brackets: an upper bound): what bounds the memory one file
takes (about 64 bytes a value; a report of a million tests holds about 11 million)."""
MAX_DEPTH = 64
"""The deepest nesting of objects and lists a report may have (reports nest about 6 deep)."""
MAX_INT_DIGITS = 40
"""The longest integer literal read (Python refuses over 4,300 digits with a ValueError)."""
MAX_STRING = 2**20
"""The longest string anywhere in a report (a collection error's traceback is the longest)."""
MAX_NAME = 4096
"""The longest name the merge repeats (suite, run id, capability, answer source, device key)."""
MAX_HOST = 255
"""The longest host name (DNS allows 253; every device id of the fleet repeats it)."""
UNKNOWN_HOST = "(unknown host)"
COLLECTION_ERROR_ID = "(collection)"
"""The test id of a collection error that names no file (pytest's session-level collect report)."""
NO_DEVICE = "-"
"""The device key of tests that ran on no device (a test without the ``device`` fixture)."""
DEFAULT_SUITE = "pytest"
"""The suite name of a pytest report that names none (``SUITE=PATH`` on the command line names it)."""
DEVICE_TYPE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}\Z")
"""A device type: torch's names and a backend's own (a renamed PrivateUse1: ``emu``)."""
DEVICE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}(:[0-9]{1,9})?\Z")
"""A device key as ``DeviceIdentity.key`` writes it: ``cpu``, ``cuda:0``."""
LEVELS = tuple(level.value for level in Level)
COUNTED_OUTCOMES = tuple(dict.fromkeys((*OUTCOME_ORDER, *TEST_OUTCOMES)))
"""What format 0 of a check report counts: outcome classes (and outcomes)."""


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
    """One JSON document from ``path``, within limits: :data:`MAX_BYTES`, :data:`MAX_VALUES`,
    :data:`MAX_DEPTH`, :data:`MAX_INT_DIGITS`, :data:`MAX_STRING`, finite numbers only, UTF-8.
    Only a regular file is read (a FIFO or a device is refused at once). Every problem is a
    :class:`ReportError`."""
    try:
        data = read_regular_file(path, limit=MAX_BYTES)
    except FileNotFoundError:
        raise ReportError("no such file", file=path) from None
    except UnsafeFileError as error:
        raise ReportError(f"not read: {error.reason}", file=path) from None
    except OSError as error:
        raise ReportError(f"cannot be read: {error.strerror or error}", file=path) from None
    values = data.count(b",") + data.count(b"[") + data.count(b"{") + 1
    if values > MAX_VALUES:
        raise ReportError(f"may hold {values:,} values, more than the {MAX_VALUES:,} read: not "
                          "read", file=path)
    try:
        document = json.loads(data.decode("utf-8"), parse_int=_int_literal,
                              parse_float=_float_literal, parse_constant=_constant)
    except json.JSONDecodeError as error:
        raise ReportError(f"not JSON: {error.msg}", file=path, line=error.lineno) from None
    except _Refused as error:
        raise ReportError(f"not read: {error}", file=path) from None
    except RecursionError:
        raise ReportError(f"nested deeper than {MAX_DEPTH} levels: not read", file=path) from None
    except (UnicodeDecodeError, ValueError, MemoryError) as error:
        raise ReportError(f"cannot be read: {error}", file=path) from None
    _check_limits(document, path)
    return document


def _check_limits(document: Any, path: str) -> None:
    """Nesting within :data:`MAX_DEPTH`, every string and key within :data:`MAX_STRING`."""
    stack = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            if len(value) > MAX_STRING:
                raise ReportError(f"holds a string of {len(value):,} characters (at most "
                                  f"{MAX_STRING:,} are read): not read", file=path)
        elif isinstance(value, (dict, list)):
            if depth > MAX_DEPTH:
                raise ReportError(f"nested deeper than {MAX_DEPTH} levels: not read", file=path)
            items = [*value.keys(), *value.values()] if isinstance(value, dict) else value
            stack.extend((item, depth + 1) for item in items)


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
        raise ReportError(f"expected a format version (an int >= 1), got {short_repr(version)}",
                          file=path, key="format")
    if version > FORMATS[kind]:
        raise ReportError(f"{kind} report format {version} is newer than this pytest-devcaps "
                          f"reads (up to {FORMATS[kind]}); upgrade pytest-devcaps to merge it",
                          file=path, key="format")
    if kind == "fleet":
        raise ReportError("already a fleet report: merge the reports it was made from",
                          file=path, key="kind")
    source = _source(document, path, kind, version, suite)
    if version == FORMATS[kind]:
        _match_schema(document, kind, path)
    return source


def _match_schema(document: Mapping[str, Any], kind: str, path: str) -> None:
    """A report of the current format has the shape its kind's schema allows, beyond what the
    readers below checked (older formats are checked by the readers alone)."""
    try:
        validate_kind(document, kind)
    except SchemaMismatch as error:
        raise ReportError(f"{error.detail} (the schema of a {kind} report, format "
                          f"{FORMATS[kind]})", file=path, key=error.where or None) from None


def _kind(document: Mapping[str, Any], path: str) -> str:
    kind = document.get("kind")
    if kind is None and "tests" in document and "mode" in document:
        return "pytest"  # written before reports named their kind
    if not isinstance(kind, str) or kind not in FORMATS:
        close = did_you_mean(kind.lower(), FORMATS) if isinstance(kind, str) else ""
        raise ReportError(f"expected kind {', '.join(map(repr, FORMATS))}, got "
                          f"{short_repr(kind)}{close}", file=path, key="kind")
    return kind


def _source(document: Mapping[str, Any], path: str, kind: str, version: int,
            suite: str | None) -> Source:
    host = _text(document, "host", path, limit=MAX_HOST) or UNKNOWN_HOST
    mode = _text(document, "mode", path) if kind == "pytest" else None
    if mode not in (None, "run", "plan"):
        raise ReportError(f"expected mode 'run' or 'plan', got {short_repr(mode)}", file=path,
                          key="mode")
    if mode == "plan":  # a plan's devices are a profile's, not this host's
        meta = _mapping(document.get("meta") or {}, "meta", path)
        host = f"plan:{_text(meta, 'profile', path, 'meta', limit=MAX_HOST) or 'profile'}"
    parts: dict[str, Any] = {"tests": ()}
    if kind == "pytest":
        parts = _pytest_parts(document, path, version, suite)
    elif kind == "check":
        parts = _check_parts(document, path)
    rank, world_size = _rank(document, path)
    return Source(
        file=path, kind="plan" if mode == "plan" else kind, format=version, host=host,
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
                       f"collection_errors[{i}]", limit=MAX_STRING)
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
        raise ReportError(f"expected ranks (ints >= 0), got {short_repr(ranks)}", file=path,
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
            key = _device_key(device, path, f"{where}.counts")
            per = _mapping(per, f"{where}.counts.{key}", path)
            for outcome, n in per.items():
                _outcome(outcome, path, f"{where}.counts.{key}", COUNTED_OUTCOMES)
                if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                    raise ReportError(f"expected a count (an int >= 0), got {short_repr(n)}",
                                      file=path, key=f"{where}.counts.{key}.{outcome}")
            counts.append((name, key, dict(per)))
            counted += sum(per.values())
        exits.append((name, _exit_code(entry, path, where), counted))
    return Source(file=path, kind="check", format=0, host=UNKNOWN_HOST, rank=None, world_size=None,
                  created=None, devcaps_version=None, devices=(), capabilities=(), tests=(),
                  counts=tuple(counts), suite_exits=tuple(exits))


def _tests(entries: Sequence[Any], suite: str, path: str, where: str) -> list[TestEntry]:
    tests = []
    for i, entry in enumerate(entries):
        at = f"{where}[{i}]"
        entry = _mapping(entry, at, path)
        nodeid = _text(entry, "nodeid", path, at, limit=MAX_STRING)
        if not nodeid:
            raise ReportError(f"expected a test id, got {short_repr(nodeid)}", file=path,
                              key=f"{at}.nodeid")
        if entry.get("outcome") is not None:
            _outcome(entry["outcome"], path, f"{at}.outcome")
        device = entry.get("device")
        key = NO_DEVICE if device is None else _device_key(device, path, f"{at}.device")
        teardown = entry.get("teardown")
        if teardown not in (None, "error"):
            raise ReportError(f"expected 'error' or nothing, got {short_repr(teardown)}",
                              file=path, key=f"{at}.teardown")
        # an error in teardown fails the test in a fleet's eyes (pytest counts it besides the
        # outcome; a fleet counts each test once)
        outcome = "error" if teardown == "error" else classify_outcome(entry)
        tests.append(TestEntry(suite, key, nodeid, outcome))
    return tests


def _outcome(value: Any, path: str, key: str,
             known: Sequence[str] = TEST_OUTCOMES) -> str:
    """An outcome of ``known`` (``"FAILED"`` is no pass: it is refused)."""
    if not isinstance(value, str) or value not in known:
        close = did_you_mean(value.lower(), known) if isinstance(value, str) else ""
        raise ReportError(f"expected an outcome ({', '.join(known)}), got "
                          f"{short_repr(value)}{close}", file=path, key=key)
    return value


def _device_key(value: Any, path: str, key: str) -> str:
    """A device key (``cuda:0``, ``cpu``) or :data:`NO_DEVICE`."""
    if not isinstance(value, str) or not (value == NO_DEVICE or DEVICE_KEY.match(value)):
        raise ReportError(f"expected a device key (cpu, cuda:0...), got {short_repr(value)}",
                          file=path, key=key)
    return value


_IDENTITY_TEXT = ("vendor", "name", "arch", "torch_version", "runtime_version",
                  "driver_version")


def _devices(entries: Sequence[Any], path: str) -> list[Mapping[str, Any]]:
    devices: list[Mapping[str, Any]] = []
    for i, entry in enumerate(entries):
        at = f"devices[{i}]"
        entry = _mapping(entry, at, path)
        kind = entry.get("type")
        if not isinstance(kind, str) or not DEVICE_TYPE.match(kind):
            raise ReportError(f"expected a device type (cpu, cuda, a backend's name), got "
                              f"{short_repr(kind)}", file=path, key=f"{at}.type")
        for name in ("index", "memory_bytes", "count"):
            value = entry.get(name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 0):
                raise ReportError(f"expected an int >= 0 or null, got {short_repr(value)}",
                                  file=path, key=f"{at}.{name}")
        for name in _IDENTITY_TEXT:
            _text(entry, name, path, at)
        _mapping(entry.get("facts") or {}, f"{at}.facts", path)
        devices.append({**entry, "key": DeviceIdentity.from_dict(entry).key})
    return devices


def _records(entries: Sequence[Any], path: str) -> list[Mapping[str, Any]]:
    records: list[Mapping[str, Any]] = []
    for i, entry in enumerate(entries):
        at = f"capabilities[{i}]"
        entry = _mapping(entry, at, path)
        capability = _text(entry, "capability", path, at)
        if not capability:
            raise ReportError(f"expected a capability name, got {short_repr(capability)}",
                              file=path, key=f"{at}.capability")
        level = entry.get("level")
        if not isinstance(level, str) or level not in LEVELS:
            close = did_you_mean(level.lower(), LEVELS) if isinstance(level, str) else ""
            raise ReportError(f"expected a level ({', '.join(LEVELS)}), got "
                              f"{short_repr(level)}{close}", file=path, key=f"{at}.level")
        records.append({"capability": capability,
                        "device": _device_key(entry.get("device"), path, f"{at}.device"),
                        "level": level, "reason": _text(entry, "reason", path, at,
                                                        limit=MAX_STRING) or "",
                        "source": _text(entry, "source", path, at) or ""})
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


def _text(document: Mapping[str, Any], key: str, path: str, where: str = "", *,
          limit: int = MAX_NAME) -> str | None:
    """A string of at most ``limit`` characters, or None when absent."""
    value = document.get(key)
    at = f"{where}.{key}" if where else key
    if value is not None and not isinstance(value, str):
        raise ReportError(f"expected a string, got {_type(value)}", file=path, key=at)
    if value is not None and len(value) > limit:
        raise ReportError(f"a string of {len(value):,} characters; at most {limit:,} are read "
                          "here", file=path, key=at)
    return value


def _int(document: Mapping[str, Any], key: str, path: str) -> int | None:
    value = document.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise ReportError(f"expected an int, got {_type(value)}", file=path, key=key)
    return value
