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
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from pytest_devcaps.report.formats import OUTCOME_ORDER, stamp
from pytest_devcaps.report.sources import NO_DEVICE, Source

FAILING = ("error", "failed")
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
    fleet = stamp("fleet")
    fleet.update({
        "sources": [s.describe() for s in sources],
        "devices": [d.to_dict() for d in sorted(devices.by_id.values(), key=_device_order)],
        "capabilities": sorted({c["capability"] for c in cells}),
        "cells": cells,
        "conflicts": [{"capability": c["capability"], "device": c["device"],
                       "levels": sorted({a["level"] for a in c["answers"]})}
                      for c in cells if c["level"] == "conflict"],
        "suites": suites,
    })
    fleet["summary"] = {
        "reports": len(sources), "hosts": len({s.host for s in sources}),
        "devices": len(fleet["devices"]), "capability_conflicts": len(fleet["conflicts"]),
        "duplicate_tests": duplicates,
        "disagreeing_tests": sum(len(s["disagreements"]) for s in suites),
        "failing_tests": sum(len(s["failing"]) for s in suites),
    }
    return fleet


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
