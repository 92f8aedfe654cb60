"""Two runs compared (``devcaps report diff BASE NEW``): per device, what started failing, what
passes now, what is skipped now, whose reason changed, what is gone.

Each side is one report (``pytest --devcaps-json``, ``devcaps check --json``), read and checked
by :mod:`pytest_devcaps.report.sources`, or a fleet document (``devcaps report merge``), which
keeps every test's count but only the failing tests' ids: against a fleet, "passes now" is "no
longer failing" and the other lists are empty (say so, never guess). Devices are matched by key
(``cpu``, ``cuda:0``) across reports; a fleet's devices are ``host/key``, the host dropped when
the fleet has one host.

A *regression* is a test failing now that did not fail before (a new test that fails included; a
strict xfail that passes now fails its run, but is a fix: it is listed as passing now). Standard
library only.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from pytest_devcaps.report.formats import ReportError
from pytest_devcaps.report.sources import NO_DEVICE, read_json, source_from_document

FAILING = frozenset({"failed", "error"})
PASSING = frozenset({"passed", "xpassed"})
SKIPPED = frozenset({"skipped-by-capability", "skipped-other", "would-skip"})
KINDS = ("newly_failing", "newly_passing", "newly_skipped", "reason_changed", "gone", "new")
"""The lists of a device's diff, in the order they are shown."""
TITLES = {"newly_failing": "newly failing", "newly_passing": "passing now",
          "newly_skipped": "newly skipped", "reason_changed": "reason changed",
          "gone": "gone (not in the new run)", "new": "new tests"}
FAIL_ON = ("failing", "skipped", "gone")
"""What ``--fail-on`` may name: newly failing (the default), newly skipped, gone."""
STRICT_XPASS = "[XPASS(strict)]"


@dataclass(frozen=True)
class Outcome:
    """One test on one device in one run."""

    nodeid: str
    device: str
    outcome: str
    reason: str = ""
    missing: tuple[str, ...] = ()
    """What a skip by capability lacked (``dtype.bf16 on cpu``)."""
    expectation: Mapping[str, Any] | None = None

    @property
    def strict_xpass(self) -> bool:
        return self.outcome == "failed" and self.reason.startswith(STRICT_XPASS)


@dataclass
class Side:
    """One run as the diff reads it."""

    path: str
    kind: str
    tests: dict[tuple[str, str], Outcome] = field(default_factory=dict)
    complete: bool = True
    """Every test's outcome is known (a fleet keeps only the failing ones)."""
    counts: dict[str, Counter[str]] = field(default_factory=dict)


def load_side(path: str, check_fleet: Callable[[dict[str, Any], str], Any]) -> Side:
    """A report or a fleet document, checked (a :class:`ReportError` names file and key);
    ``check_fleet(document, path)`` checks a fleet document (the command's schema check)."""
    document = read_json(path)
    if isinstance(document, dict) and document.get("kind") == "fleet":
        check_fleet(document, path)
        return _fleet_side(document, path)
    source = source_from_document(document, path)
    raw = _raw_entries(document)
    side = Side(path, source.kind)
    for test in source.tests:
        entry = raw.get((test.nodeid, test.device), {})
        missing = tuple(f"{m.get('requirement')} on {m.get('device')}"
                        for m in entry.get("missing", []) if isinstance(m, dict))
        expectation = entry.get("expectation") if isinstance(entry.get("expectation"), dict) else None
        side.tests[(test.device, test.nodeid)] = Outcome(
            test.nodeid, test.device, test.outcome, str(entry.get("reason") or ""), missing,
            expectation)
        side.counts.setdefault(test.device, Counter())[test.outcome] += 1
    return side


def _raw_entries(document: Any) -> dict[tuple[str, str], Mapping[str, Any]]:
    """The tests as written (reasons, missing requirements, expectations), by id and device."""
    lists = [document.get("tests", [])] if isinstance(document, dict) else []
    if isinstance(document, dict) and document.get("kind") == "check":
        lists = [suite.get("tests", []) for suite in document.get("suites", [])]
    found: dict[tuple[str, str], Mapping[str, Any]] = {}
    for tests in lists:
        for entry in tests:
            found[(str(entry["nodeid"]), str(entry.get("device") or NO_DEVICE))] = entry
    return found


def _fleet_side(document: Mapping[str, Any], path: str) -> Side:
    hosts = {d.get("host") for d in document.get("devices", [])}
    side = Side(path, "fleet", complete=False)
    for row in document.get("suites", []):
        device = _fleet_device(str(row["device"]), len(hosts) == 1)
        side.counts.setdefault(device, Counter()).update(row.get("counts", {}))
        outcomes = {d["nodeid"]: min(d["outcomes"], key=_worst) for d in row.get("disagreements", [])}
        for nodeid in row.get("failing", []):
            side.tests[(device, nodeid)] = Outcome(nodeid, device, outcomes.get(nodeid, "failed"))
    return side


def _worst(outcome: str) -> int:
    from pytest_devcaps.report.formats import OUTCOME_ORDER

    return OUTCOME_ORDER.index(outcome) if outcome in OUTCOME_ORDER else len(OUTCOME_ORDER)


def _fleet_device(device_id: str, one_host: bool) -> str:
    return device_id.partition("/")[2] if one_host and "/" in device_id else device_id


# -- the comparison ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Change:
    """One test whose state differs between the runs."""

    nodeid: str
    before: str
    after: str
    detail: str

    def to_dict(self) -> dict[str, str]:
        return {"nodeid": self.nodeid, "before": self.before, "after": self.after,
                "detail": self.detail}


def _passing_detail(base: Outcome | None, new: Outcome) -> str:
    rule = (new.expectation or (base.expectation if base else None)) or {}
    where = f"{rule.get('file')}:{rule.get('line')}" if rule.get("file") else ""
    if new.strict_xpass:
        return f"a strict xfail passes now: take it out of {where or 'the expectations file'}"
    if base is not None and base.outcome == "xfailed" or rule.get("outcome") == "xfail":
        return f"the xfail passes now: take it out of {where or 'the expectations file'}"
    if base is not None and base.outcome == "skipped-by-capability":
        return f"{'; '.join(base.missing) or 'the capability'} holds now"
    if base is not None and base.outcome in SKIPPED:
        return f"no longer skipped ({base.reason})" if base.reason else "no longer skipped"
    return "was failing" if base is not None else "a new test"


def _classify(base: Outcome | None, new: Outcome | None) -> tuple[str, Change] | None:
    before = base.outcome if base else "(absent)"
    after = new.outcome if new else "(absent)"
    nodeid = (new or base).nodeid  # type: ignore[union-attr]
    if new is None:
        return "gone", Change(nodeid, before, after, base.reason if base else "")
    if new.strict_xpass or (new.outcome in PASSING and base is not None and
                            (base.outcome in FAILING | SKIPPED | {"xfailed"} or base.strict_xpass)):
        if base is not None and base.strict_xpass and new.strict_xpass:
            return None
        return "newly_passing", Change(nodeid, before, "passed" if new.strict_xpass else after,
                                       _passing_detail(base, new))
    if new.outcome in FAILING and (base is None or base.outcome not in FAILING or base.strict_xpass):
        return "newly_failing", Change(nodeid, before, after, new.reason)
    if base is None:
        return "new", Change(nodeid, before, after, new.reason)
    if new.outcome in SKIPPED and base.outcome not in SKIPPED:
        return "newly_skipped", Change(nodeid, before, after, new.reason)
    if new.outcome == base.outcome and new.outcome not in PASSING and new.reason != base.reason:
        return "reason_changed", Change(nodeid, before, after, f"{base.reason!r} -> {new.reason!r}")
    return None


def compare(base: Side, new: Side) -> dict[str, Any]:
    """The diff document: per device each list of :data:`KINDS`, and the summary."""
    devices: dict[str, dict[str, list[Change]]] = {}
    for device, nodeid in sorted(set(base.tests) | set(new.tests)):
        found = _change(base, new, device, nodeid)
        if found is not None:
            devices.setdefault(device, {k: [] for k in KINDS})[found[0]].append(found[1])
    rows = [{"device": d, **{k: [c.to_dict() for c in v] for k, v in lists.items()}}
            for d, lists in sorted(devices.items())]
    summary = {k: sum(len(r[k]) for r in rows) for k in KINDS}
    return {"base": base.path, "new": new.path, "base_kind": base.kind, "new_kind": new.kind,
            "complete": base.complete and new.complete, "devices": rows, "summary": summary,
            "counts": {"base": _plain(base.counts), "new": _plain(new.counts)}}


def _change(base: Side, new: Side, device: str, nodeid: str) -> tuple[str, Change] | None:
    """How one test changed; a test a fleet does not list is not failing there (nothing more
    is known of it)."""
    before, after = base.tests.get((device, nodeid)), new.tests.get((device, nodeid))
    if after is None and not new.complete:
        if before is None or before.outcome not in FAILING:
            return None
        return "newly_passing", Change(nodeid, before.outcome, "not failing",
                                       f"not among {new.path}'s failing tests")
    if before is None and not base.complete:
        if after is None or after.outcome not in FAILING:
            return None
        return "newly_failing", Change(nodeid, "not failing", after.outcome, after.reason)
    return _classify(before, after)


def _plain(counts: Mapping[str, Counter[str]]) -> dict[str, dict[str, int]]:
    return {device: dict(sorted(c.items())) for device, c in sorted(counts.items())}


def regressions(diff: Mapping[str, Any], fail_on: Sequence[str] = ("failing",)) -> int:
    """How many changes ``fail_on`` counts as regressions (the exit status is 1 when any)."""
    lists = {"failing": "newly_failing", "skipped": "newly_skipped", "gone": "gone"}
    unknown = [name for name in fail_on if name not in lists]
    if unknown:
        from pytest_devcaps.errors import did_you_mean

        raise ReportError(f"unknown --fail-on {unknown[0]!r}{did_you_mean(unknown[0], FAIL_ON)}; "
                          f"expected {', '.join(FAIL_ON)}", file="--fail-on")
    return sum(diff["summary"][lists[name]] for name in dict.fromkeys(fail_on))
