"""Plan mode (``--devcaps-profile``): collect and evaluate against a device profile, run nothing,
and report what would run and what would be skipped, and for which capability.

All of plan mode is here: the command-line rewrite that keeps pytest-xdist from starting workers,
the test loop that plans instead of running, and the plan's text (its JSON is
``reporting.write_json_report`` with ``mode="plan"``). Registered with the plugin module (its
``pytest_plugins``), so the command-line hook is in place before ``pytest_cmdline_main`` runs.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Generator

import pytest

from pytest_devcaps.errors import DevcapsError
from pytest_devcaps.session.options import resolve_settings
from pytest_devcaps.session.state import EVALUATION_KEY, SessionState, session_state


@pytest.hookimpl(wrapper=True)
def pytest_cmdline_main(config: pytest.Config) -> Generator[None, Any, Any]:
    # A wrapper runs before every plain implementation, so before xdist's own (tryfirst)
    # pytest_cmdline_main, which turns -n / -d / --dist into workers.
    plan_in_one_process(config)
    return (yield)


def plan_in_one_process(config: pytest.Config) -> None:
    """With a profile, no xdist workers: a plan collects and evaluates in this process and runs
    nothing. Sets what ``-n0`` sets; xdist's ``pytest_cmdline_main`` then leaves distribution off."""
    if getattr(config, "workerinput", None) is not None or not hasattr(config.option, "numprocesses"):
        return  # an xdist worker, or no xdist
    try:
        profile = resolve_settings(config).profile.value
    except DevcapsError:
        return  # pytest_configure resolves the settings again and reports this as a usage error
    if profile:
        config.option.numprocesses = 0
        config.option.distload = False
        config.option.dist = "no"


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    state = session_state(session.config)
    if not state.settings.profile.value or state.is_worker:
        return None
    plan = plan_items(session.items)
    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    if tr is not None:
        write_plan(tr, state, plan)
    if state.settings.json_path:
        from pytest_devcaps.session.reporting import json_report_path, write_json_report

        path = json_report_path(state)
        if path is not None:
            write_json_report(path, state, plan, exitstatus=0, mode="plan")
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
            by_cap[f"{missing['requirement']} on {missing['device']}: {missing['found']}"] += 1
    for entry in plan:
        if entry["outcome"] == "would-skip":
            reasons = "; ".join(m["reason"] for m in entry["missing"])
            tr.line(f"SKIP {entry['nodeid']}: {reasons}")
        elif tr.config.get_verbosity() > 0:
            tr.line(f"RUN  {entry['nodeid']}")
    for line, count in sorted(by_cap.items(), key=lambda kv: (-kv[1], kv[0])):
        tr.line(f"{count:5d}  skipped for {line}")
    tr.line(f"{len(runs)} would run, {len(skips)} would be skipped on {profile} (nothing was run)")
