"""Reports: the capability header, skips grouped by missing capability, the JSON report, plans."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from pytest_devcaps.files import write_atomic
from pytest_devcaps.model import CapabilityRecord, DeviceIdentity, Level
from pytest_devcaps.state import EVALUATION_KEY, SessionState, session_state

JSON_FORMAT = 1


def describe_identity(identity: DeviceIdentity) -> str:
    parts = [f"{identity.key}: {identity.name}", f"vendor={identity.vendor}", f"arch={identity.arch}"]
    if identity.memory_bytes:
        parts.append(f"memory={identity.memory_bytes / 2**30:.1f}GiB")
    if identity.count != 1:
        parts.append(f"count={identity.count}")
    if identity.runtime_version:
        parts.append(f"runtime={identity.runtime_version}")
    if identity.driver_version:
        parts.append(f"driver={identity.driver_version}")
    return ", ".join(parts)


def compact_levels(records: list[CapabilityRecord]) -> str:
    """``native 14 (dtype.fp64 ...), emulated 5 (...), unsupported 9, unknown 0``."""
    grouped: dict[Level, list[str]] = {level: [] for level in Level}
    for record in records:
        grouped[record.level].append(record.capability)
    parts = []
    for level in Level:
        names = grouped[level]
        if level in (Level.NATIVE, Level.EMULATED) and names:
            parts.append(f"{level.value} {len(names)} ({' '.join(names)})")
        else:
            parts.append(f"{level.value} {len(names)}")
    return "; ".join(parts)


def capability_table(records: list[CapabilityRecord]) -> list[str]:
    width = max((len(r.capability) for r in records), default=10)
    return [f"  {r.capability:<{width}}  {r.level.value:<11} {r.source}: {r.reason}" for r in records]


def capability_matrix(registry: Any, devices: list[DeviceIdentity]) -> list[str]:
    """Capabilities down, devices across; each cell ``level/source`` (reasons: the per-device table)."""
    names = registry.capability_names
    cells = {(name, d.key): registry.record(name, d.key) for name in names for d in devices}
    width = max(len(n) for n in names)
    col = {d.key: max([len(d.key)] + [len(f"{cells[n, d.key].level.value}/{cells[n, d.key].source}")
                                      for n in names]) for d in devices}
    lines = ["  " + " " * width + "  " + "  ".join(f"{d.key:<{col[d.key]}}" for d in devices)]
    for name in names:
        row = "  ".join(f"{cells[name, d.key].level.value + '/' + cells[name, d.key].source:<{col[d.key]}}"
                        for d in devices)
        lines.append(f"  {name:<{width}}  {row}".rstrip())
    return lines


def header_lines(state: SessionState, *, verbose: bool) -> list[str]:
    registry = state.registry
    meta = registry.meta
    origin = f"profile {meta['profile']}" if meta.get("profile") else (
        f"probe cache {meta.get('cache', '?')}, probed in {meta.get('probe_seconds', 0)}s")
    lines = [f"devcaps: {len(registry.devices)} device(s), {origin}; "
             f"device tests run on: {', '.join(state.selected) or 'none'}"]
    for identity in registry.devices:
        lines.append(f"devcaps: {describe_identity(identity)}")
        records = registry.records(identity.key)
        if verbose:
            lines.extend(capability_table(records))
        else:
            lines.append(f"  {compact_levels(records)}")
    flags = state.settings.reproduce_flags()
    lines.append("devcaps: reproduce with: " + (" ".join(flags) if flags else "(defaults)"))
    return lines


def _missing_of(report: pytest.TestReport) -> list[dict[str, str]]:
    data = report.__dict__.get("devcaps")
    return list(data.get("missing", ())) if isinstance(data, dict) else []


class ReportingPlugin:
    """Collects per-test outcomes (reports from xdist workers too) and writes the summaries."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.tests: dict[str, dict[str, Any]] = {}
        self.started = time.time()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        data = report.__dict__.get("devcaps")
        entry = self.tests.setdefault(report.nodeid, {"nodeid": report.nodeid, "outcome": None})
        if isinstance(data, dict):
            entry.update(device=data.get("device"), requires=data.get("requires", []),
                         missing=data.get("missing", []))
        if report.when == "call" or (report.when == "setup" and not report.passed):
            entry["outcome"] = report.outcome
        elif report.when == "teardown" and report.failed:
            entry["outcome"] = "error"
        if report.when == "setup" and report.failed:
            entry["outcome"] = "error"

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        groups: Counter[tuple[str, str, str]] = Counter()
        for report in terminalreporter.stats.get("skipped", []):
            for missing in _missing_of(report):
                groups[(missing["requirement"], missing["device"],
                        f"{missing['level']} ({missing['source']})")] += 1
        if not groups:
            return
        total = sum(1 for r in terminalreporter.stats.get("skipped", []) if _missing_of(r))
        terminalreporter.section("devcaps: skipped by missing capability", sep="-")
        for (requirement, dev, found), count in sorted(groups.items(), key=lambda kv: (-kv[1], kv[0])):
            terminalreporter.line(f"{count:5d}  {requirement} on {dev}: {found}")
        terminalreporter.line(f"{total} test(s) skipped for missing capabilities")

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        state = session_state(self.config)
        if state.is_worker or not state.settings.json_path or state.settings.profile.value:
            return  # a plan wrote its own report in pytest_runtestloop
        write_json_report(Path(state.settings.json_path), state, list(self.tests.values()),
                          exitstatus=int(exitstatus), mode="run")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool | None:
        state = session_state(self.config)
        if not state.settings.profile.value or state.is_worker:
            return None
        plan = plan_items(session.items)
        self.tests = {entry["nodeid"]: entry for entry in plan}
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            write_plan(tr, state, plan)
        if state.settings.json_path:
            write_json_report(Path(state.settings.json_path), state, plan, exitstatus=0, mode="plan")
        return True


def plan_items(items: list[pytest.Item]) -> list[dict[str, Any]]:
    """What would run and what would be skipped (and for which capability), without running."""
    plan = []
    for item in items:
        evaluation = item.stash.get(EVALUATION_KEY, None)
        entry: dict[str, Any] = {"nodeid": item.nodeid, "outcome": "would-run"}
        if evaluation is not None:
            entry.update(device=evaluation.device, requires=list(evaluation.required),
                         missing=[m.to_dict() for m in evaluation.missing])
            if evaluation.skip:
                entry["outcome"] = "would-skip"
        plan.append(entry)
    return plan


def write_plan(tr: Any, state: SessionState, plan: list[dict[str, Any]]) -> None:
    profile = state.registry.meta.get("profile")
    runs = [p for p in plan if p["outcome"] == "would-run"]
    skips = [p for p in plan if p["outcome"] == "would-skip"]
    tr.section(f"devcaps plan for profile {profile}", sep="=")
    by_cap: Counter[str] = Counter()
    for entry in skips:
        for missing in entry.get("missing", []):
            by_cap[f"{missing['requirement']} on {missing['device']}: {missing['level']}"] += 1
    for entry in plan:
        if entry["outcome"] == "would-skip":
            reasons = "; ".join(m["reason"] for m in entry["missing"])
            tr.line(f"SKIP {entry['nodeid']}: {reasons}")
        elif tr.config.get_verbosity() > 0:
            tr.line(f"RUN  {entry['nodeid']}")
    for line, count in sorted(by_cap.items(), key=lambda kv: (-kv[1], kv[0])):
        tr.line(f"{count:5d}  skipped for {line}")
    tr.line(f"{len(runs)} would run, {len(skips)} would be skipped on {profile} (nothing was run)")


def write_json_report(path: Path, state: SessionState, tests: list[dict[str, Any]], *,
                      exitstatus: int, mode: str) -> None:
    registry = state.registry
    payload = {
        "format": JSON_FORMAT,
        "mode": mode,
        "exitstatus": exitstatus,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "devices": [identity.to_dict() for identity in registry.devices],
        "selected_devices": state.selected,
        "capabilities": [record.to_dict() for record in registry],
        "meta": registry.meta,
        "tests": sorted(tests, key=lambda t: t["nodeid"]),
    }
    write_atomic(path, json.dumps(payload, indent=1, sort_keys=True, default=str))
