"""Many reports, one fleet document: devices by host, one answer per capability and device, and
per suite and device the outcome counts with the failing test ids.

Rules (the fleet JSON Schema documents the result):
- A device is ``<host>/<key>`` (``node3/cuda:1``). Two reports naming the same host and key
  with different hardware (type, vendor, name, arch) are two devices (``node3/cuda:1#2``): host
  names repeat across containers.
- Reports repeat answers (every torchrun rank reports its host's devices): equal answers merge
  and list every report they came from. Answers of different levels for one capability and
  device are a conflict: the cell's level is ``conflict`` and every answer is kept.
- A test reported more than once for one suite and device (ranks, reruns) counts once. When
  the reports disagree, the worst outcome counts (``formats.OUTCOME_ORDER``) and the test is
  listed under ``disagreements`` with each outcome's reports.
- Nothing fails silently: a collection error is a failing entry (``sources.load_source``); a
  report whose exit status is not 0, 1 or 5 (pytest's ``ExitCode``: passed, tests failed, no
  tests), that exited 1 with no failing test, or a check suite that exited non-zero with no
  tests is a *failed report*; per launched world (suite, run or host, world size) every rank
  must be there once. ``passed`` is false for any of them, or for a failing test.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from pytest_devcaps.report.formats import OUTCOME_ORDER, stamp
from pytest_devcaps.report.sources import NO_DEVICE, Source

FAILING = ("error", "failed")
GOOD_EXIT = (0, 1, 5)
"""pytest's ExitCode OK, TESTS_FAILED, NO_TESTS_COLLECTED: a session that ran to its end."""
EXIT_NAMES = {2: "interrupted: a collection error, Ctrl-C or a signal", 3: "internal error",
              4: "usage error", 5: "no tests collected"}
"""pytest's ExitCode values (``_pytest/config/__init__.py``), as the merge names them."""
_SAME_HARDWARE = ("type", "vendor", "name", "arch")


@dataclass
class _Device:
    id: str
    host: str
    key: str
    identity: Mapping[str, Any]
    sources: list[int] = field(default_factory=list)
    ranks: set[int] = field(default_factory=set)

    def to_dict(self) -> dict[str, Any]:
        ident = self.identity
        return {"id": self.id, "host": self.host, "key": self.key,
                "type": ident.get("type", self.key.split(":")[0]), "vendor": ident.get("vendor"),
                "name": ident.get("name"), "arch": ident.get("arch"),
                "identity": {k: v for k, v in ident.items() if k != "key"},
                "sources": self.sources, "ranks": sorted(self.ranks)}


class _Devices:
    """Fleet device ids, and per source the id of each of its device keys."""

    def __init__(self) -> None:
        self.by_id: dict[str, _Device] = {}
        self.of_source: dict[tuple[int, str], str] = {}

    def add(self, index: int, source: Source, identity: Mapping[str, Any]) -> None:
        key = str(identity["key"])
        base = f"{source.host}/{key}"
        same = [d for d in self.by_id.values() if d.host == source.host and d.key == key]
        match = next((d for d in same if _hardware(d.identity) == _hardware(identity)), None)
        if match is None:
            match = _Device(base if not same else f"{base}#{len(same) + 1}", source.host, key,
                            identity)
            self.by_id[match.id] = match
        if index not in match.sources:
            match.sources.append(index)
        self.of_source[(index, key)] = match.id

    def id_for(self, index: int, source: Source, key: str, *, ran_tests: bool = False) -> str:
        """The fleet id of device ``key`` of a source (devices it did not describe, such as
        :data:`NO_DEVICE`, are added by host and key); ``ran_tests`` notes the source's rank."""
        found = self.of_source.get((index, key))
        if found is None:
            found = f"{source.host}/{key}"
            if found not in self.by_id:
                self.by_id[found] = _Device(found, source.host, key, {"type": key})
            self.of_source[(index, key)] = found
            if index not in self.by_id[found].sources:
                self.by_id[found].sources.append(index)
        if ran_tests and source.rank is not None:
            self.by_id[found].ranks.add(source.rank)
        return found


def _hardware(identity: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(identity.get(k) for k in _SAME_HARDWARE)


def merge(sources: Sequence[Source]) -> dict[str, Any]:
    """The fleet document of ``sources`` (in the order given: report indices refer to it)."""
    devices = _Devices()
    for index, source in enumerate(sources):
        for identity in source.devices:
            devices.add(index, source, identity)
    cells = _cells(sources, devices)
    suites, duplicates = _suites(sources, devices)
    failures = [source_failures(source) for source in sources]
    groups = rank_groups(sources)
    fleet = stamp("fleet")
    fleet.update({
        "sources": [{**s.describe(), "failed": why} for s, why in zip(sources, failures)],
        "devices": [d.to_dict() for d in sorted(devices.by_id.values(), key=_device_order)],
        "capabilities": sorted({c["capability"] for c in cells}),
        "cells": cells,
        "conflicts": [{"capability": c["capability"], "device": c["device"],
                       "levels": sorted({a["level"] for a in c["answers"]})}
                      for c in cells if c["level"] == "conflict"],
        "suites": suites,
        "ranks": groups,
        "problems": _problems(sources, failures, groups),
    })
    fleet["summary"] = {
        "reports": len(sources), "hosts": len({s.host for s in sources}),
        "devices": len(fleet["devices"]), "capability_conflicts": len(fleet["conflicts"]),
        "duplicate_tests": duplicates,
        "disagreeing_tests": sum(len(s["disagreements"]) for s in suites),
        "failing_tests": sum(len(s["failing"]) for s in suites),
        "failed_reports": sum(bool(why) for why in failures),
        "missing_ranks": sum(len(g["missing"]) for g in groups),
        "repeated_ranks": sum(len(g["repeated"]) for g in groups),
    }
    summary = fleet["summary"]
    fleet["passed"] = not any(summary[key] for key in (
        "failing_tests", "failed_reports", "missing_ranks", "repeated_ranks"))
    return fleet


def _failing_in(source: Source, suite: str | None = None) -> bool:
    return any(t.outcome in FAILING for t in source.tests if suite in (None, t.suite)) or any(
        per.get(outcome, 0) for name, _, per in source.counts if suite in (None, name)
        for outcome in FAILING)


def source_failures(source: Source) -> list[str]:
    """Why a report failed beyond its failing tests (empty: it did not)."""
    reasons = []
    status = source.exitstatus
    if status is not None and status not in GOOD_EXIT:
        reasons.append(f"exit status {status} ({EXIT_NAMES.get(status, 'not a pytest exit status')})")
    elif status == 1 and not _failing_in(source):
        reasons.append("exit status 1 (tests failed) but no failing test in the report")
    for suite, code, tests in source.suite_exits:
        if code not in GOOD_EXIT or (code and not tests):
            reasons.append(f"suite {suite} exited {code} with {tests} test(s)")
        elif code == 1 and not _failing_in(source, suite):
            reasons.append(f"suite {suite} exited 1 (tests failed) but no failing test")
    if source.passed is False and not reasons and not _failing_in(source):
        reasons.append("the check report says it did not pass")
    reasons += [f"rank {rank} failed (rank {source.rank} says)" for rank in source.failed_peers]
    reasons += [f"rank {rank} never reported its results (rank {source.rank} says: it died or "
                f"hung)" for rank in source.silent_peers]
    return reasons


def rank_groups(sources: Sequence[Source]) -> list[dict[str, Any]]:
    """Per launched world (suite, torchrun run id or else host, world size): the ranks
    reported, the ranks missing and the ranks reported more than once."""
    groups: dict[tuple[str, str, str, int], list[int]] = {}
    for index, source in enumerate(sources):
        if source.kind != "pytest" or source.rank is None or not source.world_size \
                or source.world_size < 2:
            continue
        run = source.run_id if source.run_id not in (None, "", "none") else None
        key = (source.suite or "", "run" if run else "host", run or source.host,
               source.world_size)
        groups.setdefault(key, []).append(index)
    rows = []
    for (suite, by, name, world_size), indices in sorted(groups.items()):
        ranks = Counter(sources[i].rank for i in indices)
        rows.append({"suite": suite, "run_id": name if by == "run" else None,
                     "hosts": sorted({sources[i].host for i in indices}),
                     "world_size": world_size, "sources": indices,
                     "ranks": sorted(r for r in ranks if r is not None),
                     "missing": [r for r in range(world_size) if r not in ranks],
                     "repeated": sorted(r for r, n in ranks.items() if r is not None and n > 1)})
    return rows


def _problems(sources: Sequence[Source], failures: Sequence[list[str]],
              groups: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every failed report and incomplete world, one line each, for stderr and the page."""
    lines = [f"report #{i + 1} ({sources[i].file}) failed: {reason}"
             for i, why in enumerate(failures) for reason in why]
    for group in groups:
        world = (f"suite {group['suite']}, world of {group['world_size']} on "
                 f"{', '.join(group['hosts'])}"
                 + (f" (run {group['run_id']})" if group["run_id"] else ""))
        if group["missing"]:
            lines.append(f"{world}: no report from rank(s) "
                         f"{', '.join(map(str, group['missing']))} (died before writing it, "
                         f"or not given to the merge)")
        if group["repeated"]:
            lines.append(f"{world}: rank(s) {', '.join(map(str, group['repeated']))} reported "
                         f"more than once")
    return lines


def _device_order(device: _Device) -> tuple[str, bool, str, str]:
    return (device.host, device.key == NO_DEVICE, device.key.split(":")[0], device.id)


def _cells(sources: Sequence[Source], devices: _Devices) -> list[dict[str, Any]]:
    answers: dict[tuple[str, str], dict[tuple[str, str, str], list[int]]] = {}
    for index, source in enumerate(sources):
        for record in source.capabilities:
            device = devices.id_for(index, source, record["device"])
            answer = (record["level"], record["reason"], record["source"])
            found = answers.setdefault((record["capability"], device), {}).setdefault(answer, [])
            if index not in found:
                found.append(index)
    cells = []
    for (capability, device), by_answer in sorted(answers.items()):
        listed = [{"level": level, "reason": reason, "source": origin, "sources": where}
                  for (level, reason, origin), where in by_answer.items()]
        first = listed[0]
        levels = {a["level"] for a in listed}
        cells.append({"capability": capability, "device": device,
                      "level": first["level"] if len(levels) == 1 else "conflict",
                      "reason": first["reason"], "source": first["source"], "answers": listed})
    return cells


def _suites(sources: Sequence[Source], devices: _Devices) -> tuple[list[dict[str, Any]], int]:
    """Per suite and device: counts, failing ids, disagreements; and how many entries repeated."""
    outcomes: dict[tuple[str, str], dict[str, dict[str, list[int]]]] = {}
    extra: dict[tuple[str, str], Counter[str]] = {}
    duplicates = 0
    for index, source in enumerate(sources):
        for test in source.tests:
            device = devices.id_for(index, source, test.device, ran_tests=True)
            cell = outcomes.setdefault((test.suite, device), {})
            seen = cell.setdefault(test.nodeid, {})
            duplicates += bool(seen)
            seen.setdefault(test.outcome, []).append(index)
        for suite, key, given in source.counts:
            extra.setdefault((suite, devices.id_for(index, source, key)), Counter()).update(given)
    rows = []
    for suite, device in sorted(set(outcomes) | set(extra)):
        tests = outcomes.get((suite, device), {})
        counts: Counter[str] = Counter(extra.get((suite, device), Counter()))
        failing, disagreements = [], []
        for nodeid, by_outcome in sorted(tests.items()):
            worst = min(by_outcome, key=_rank)
            counts[worst] += 1
            if worst in FAILING:
                failing.append(nodeid)
            if len(by_outcome) > 1:
                disagreements.append({"nodeid": nodeid, "outcomes": by_outcome})
        rows.append({"suite": suite, "device": device, "counts": dict(sorted(counts.items())),
                     "failing": failing, "disagreements": disagreements})
    return rows, duplicates


def _rank(outcome: str) -> int:
    return OUTCOME_ORDER.index(outcome) if outcome in OUTCOME_ORDER else len(OUTCOME_ORDER)
