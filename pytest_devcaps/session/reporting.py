"""Reports of a pytest run: the capability header, skips grouped by missing capability, the JSON report."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from pytest_devcaps.errors import DevcapsError
from pytest_devcaps.session.keys import HARDWARE_REPORT_KEY, session_state
from pytest_devcaps.session.state import SessionState


def header_lines(state: SessionState, *, verbose: bool) -> list[str]:
    from pytest_devcaps.report.table import (
        build_note,
        capability_table,
        compact_levels,
        describe_identity,
        describe_origin,
    )

    registry = state.registry
    lines = [f"devcaps: {len(registry.devices)} device(s), {describe_origin(registry.meta)}; "
             f"device tests run on: {', '.join(state.selected) or 'none'}{build_note(registry)}"]
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


def found_phrase(missing: dict[str, str]) -> str:
    """What a test found instead of what it required, phrased for the kind of requirement."""
    if missing.get("kind") in ("devices", "memory"):
        return f"found {missing['found']} ({missing['source']})"
    return f"{missing['found']} ({missing['source']})"


def _missing_of(report: pytest.TestReport) -> list[dict[str, str]]:
    data = report.__dict__.get("devcaps")
    return list(data.get("missing", ())) if isinstance(data, dict) else []


def record_outcome(entry: dict[str, Any], when: str, category: str, reason: str | None = None) -> None:
    """Fold one report's terminal category (and its reason) into a test's JSON entry.

    ``outcome`` is the test's own: an error or skip at setup, else the call's (``passed``,
    ``failed``, ``skipped``, ``xfailed``, ``xpassed``); a rerun attempt (pytest-rerunfailures)
    only counts in ``reruns``, so the final attempt decides. An error in teardown leaves the
    outcome alone and sets ``teardown: error`` (and ``teardown_reason``), as pytest shows a
    passed test with a teardown error as one passed and one error. ``reason`` goes with the
    outcome it explains: the skip's, the xfail's, the failure's summary line.
    """
    if category == "rerun":
        entry["reruns"] = entry.get("reruns", 0) + 1
    elif when == "teardown":
        if category == "error":
            entry["teardown"] = "error"
            if reason is not None:
                entry["teardown_reason"] = reason
    elif category:  # a passed setup has the empty category
        entry["outcome"] = category
        if reason is not None:
            entry["reason"] = reason
        else:
            entry.pop("reason", None)


def reason_of(report: pytest.TestReport | pytest.CollectReport) -> str | None:
    """The reason pytest's terminal gives for a report: a skip's or xfail's reason as the
    short summary prints it (``_pytest.terminal._get_raw_skip_reason``), a failure's crash
    message (its first line, as ``FAILED id - message``); None for a pass."""
    wasxfail = getattr(report, "wasxfail", None)
    if isinstance(wasxfail, str):
        return wasxfail.removeprefix("reason: ")
    if report.skipped:
        longrepr = report.longrepr
        if isinstance(longrepr, tuple) and len(longrepr) == 3:
            text = str(longrepr[2])
            return "" if text == "Skipped" else text.removeprefix("Skipped: ")
        return str(longrepr) if longrepr is not None else ""
    if report.failed:
        if isinstance(report.longrepr, str):  # also what xdist sends for a fixture lookup error
            return _error_line(report.longrepr)
        crash = getattr(report.longrepr, "reprcrash", None)
        message = getattr(crash, "message", None)
        if isinstance(message, str):
            return message.split("\n", 1)[0]
        return _error_line(str(report.longrepr)) if report.longrepr is not None else ""
    return None


def _error_line(text: str) -> str:
    """A representation without a crash message (a fixture lookup error): its first ``E``
    line, as pytest prints it, else its last line."""
    lines = text.strip().splitlines()
    marked = [line[1:].strip() for line in lines if line.startswith("E ")]
    return marked[0] if marked else (lines[-1] if lines else "")


def skip_groups(reports: list[Any]) -> tuple[Counter[tuple[str, ...]], int, int]:
    """Every skip counted once, grouped by its reason: a devcaps skip by the requirements it
    misses (all of them, as one group: a test missing two things is one test), any other skip
    (PyTorch's gates, skip marks, ``SkipTest``) by its own reason. Returns the groups, the
    devcaps-caused count and the total, which is pytest's own skip count."""
    groups: Counter[tuple[str, ...]] = Counter()
    ours = total = 0
    for report in reports:
        if not getattr(report, "count_towards_summary", True):
            continue
        total += 1
        missing = _missing_of(report)
        if missing:
            ours += 1
            key = tuple(dict.fromkeys(f"{m['requirement']} on {m['device']}: {found_phrase(m)}"
                                      for m in missing))
        else:
            key = ("", reason_of(report) or "(no reason given)")
        groups[key] += 1
    return groups, ours, total


def group_line(key: tuple[str, ...], count: int) -> str:
    if key and key[0] == "":
        return f"{count:5d}  {key[1]}"
    text = "; ".join(key)
    if len(key) > 1:
        text += f"  [{'the test misses' if count == 1 else 'each test misses'} {len(key)} things]"
    return f"{count:5d}  {text}"


class OutcomeRecorder:
    """Per-test outcomes for the JSON report (reports from xdist workers too), registered only
    when one is asked for: every other session is spared a hook call per report.

    Outcomes are the categories pytest's terminal counts (``pytest_report_teststatus``, the
    hook that plugins such as pytest-rerunfailures extend), so the JSON report's ``summary``
    matches the terminal's last line.
    """

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.tests: dict[str, dict[str, Any]] = {}
        self.summary: Counter[str] = Counter()
        self.collection_errors: list[dict[str, str]] = []

    def _count(self, report: pytest.TestReport | pytest.CollectReport) -> str:
        status = self.config.hook.pytest_report_teststatus(report=report, config=self.config)
        category = str(status[0]) if status else ""
        if category and getattr(report, "count_towards_summary", True):
            self.summary[category] += 1
        return category

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        data = report.__dict__.get("devcaps")
        entry = self.tests.setdefault(report.nodeid, {"nodeid": report.nodeid, "outcome": None})
        if isinstance(data, dict):
            entry.update(device=data.get("device"), requires=data.get("requires", []),
                         missing=data.get("missing", []))
        if isinstance(report.__dict__.get(HARDWARE_REPORT_KEY), str):
            entry["hardware"] = report.__dict__[HARDWARE_REPORT_KEY]
        for name, value in report.user_properties:
            if name == "devcaps_gates":
                entry["gates"] = value
            elif name == "devcaps_expectation":  # session.expect: the rule that decides it
                entry["expectation"] = value
        category = self._count(report)
        record_outcome(entry, report.when, category, reason_of(report) if category else None)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self._count(report)
            self.collection_errors.append({"nodeid": report.nodeid,
                                           "longrepr": str(report.longrepr)})


class ReportingPlugin:
    """The skipped-by-capability summary and the JSON report at the end of the session; its
    ``outcomes`` recorder is registered beside it for ``--devcaps-json``."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.outcomes = OutcomeRecorder(config)

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """Every skipped test once, grouped by reason; the total is pytest's own skip count.
        Printed when devcaps took part in the session (its registry was built)."""
        reports = terminalreporter.stats.get("skipped", [])
        groups, ours, total = skip_groups(reports)
        from pytest_devcaps.session.keys import GATES_SEEN_KEY

        took_part = session_state(self.config).built or self.config.stash.get(GATES_SEEN_KEY, False)
        if not groups or not (ours or took_part):
            return
        terminalreporter.section("devcaps: skipped tests by reason", sep="-")
        for key, count in sorted(groups.items(), key=lambda kv: (-kv[1], kv[0])):
            terminalreporter.line(group_line(key, count))
        terminalreporter.line(f"{total} test(s) skipped: {ours} for missing capabilities, "
                              f"{total - ours} for other reasons")

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """The JSON report, with ``session.exitstatus`` as it stands now: under torchrun rank 0
        has by now counted every other rank's failures (``torchrun.RankSession``, tryfirst)."""
        state = session_state(self.config)
        if state.is_worker or not state.settings.json_path or state.settings.profile.value:
            return  # a plan wrote its own report (plan.pytest_runtestloop)
        path = json_report_path(state)
        if path is None:
            return
        ranks = self.config.pluginmanager.get_plugin("devcaps-ranks")  # parallel.torchrun
        peers = ranks.peer_fields() if ranks is not None else {}
        try:
            write_json_report(path, state, list(self.outcomes.tests.values()),
                              exitstatus=int(session.exitstatus), mode="run",
                              outcomes={"summary": dict(self.outcomes.summary),
                                        "collection_errors": self.outcomes.collection_errors,
                                        **peers, **expectation_fields(self.config)})
        except (OSError, DevcapsError) as exc:  # the path changed since configure checked it
            message = f"pytest-devcaps: --devcaps-json: cannot write {state.settings.json_path!r}: {exc}"
            terminal = self.config.pluginmanager.get_plugin("terminalreporter")
            if terminal is not None:
                terminal.ensure_newline()
                terminal.write_line(f"ERROR: {message}", red=True)
            else:
                print(f"ERROR: {message}", file=sys.stderr)
            session.exitstatus = pytest.ExitCode.USAGE_ERROR


def json_report_path(state: SessionState) -> Path | None:
    """``--devcaps-json`` with ``{rank}``, ``{host}``... filled in (every rank of a launched
    world writes one: ``ranks.report_path``); None without ``--devcaps-json``."""
    from pytest_devcaps.distributed.ranks import launched_world, report_path

    if not state.settings.json_path:
        return None
    return Path(report_path(state.settings.json_path, launched_world()))


def expectation_fields(config: pytest.Config) -> dict[str, Any]:
    """The expectations files' part of the JSON report (``session.expect``), if any."""
    plugin = config.pluginmanager.get_plugin("devcaps-expect")
    return plugin.report_fields() if plugin is not None else {}


def hardware_counts(tests: list[dict[str, Any]]) -> dict[str, int]:
    """Tests per hardware class (``generic``, ``accelerator``, a device type or vendor)."""
    return dict(Counter(t["hardware"] for t in tests if t.get("hardware")))


def write_json_report(path: Path, state: SessionState, tests: list[dict[str, Any]], *,
                      exitstatus: int, mode: str, outcomes: dict[str, Any] | None = None) -> None:
    """The report of a run (``outcomes``: ``summary`` counts by terminal category and
    ``collection_errors``) or of a plan; every report says where it ran (``rank``,
    ``world_size``, ``local_rank``, ``host``)."""
    from pytest_devcaps._util.files import write_atomic
    from pytest_devcaps.distributed.ranks import launched_world, report_fields
    from pytest_devcaps.report.formats import stamp  # a session without a report never loads it

    registry = state.registry
    payload = {
        **stamp("pytest"),  # format, kind, created, host, devcaps_version: as every report
        **report_fields(launched_world()),
        **(outcomes or {}),
        "mode": mode,
        "exitstatus": exitstatus,
        "devices": [identity.to_dict() for identity in registry.devices],
        "selected_devices": state.selected,
        "capabilities": [record.to_dict() for record in registry],
        "meta": registry.meta,
        "tests": sorted(tests, key=lambda t: t["nodeid"]),
        "hardware": hardware_counts(tests),
        "hardware_selection": list(state.settings.hardware.value),
    }
    write_atomic(path, json.dumps(payload, indent=1, sort_keys=True, default=str))
