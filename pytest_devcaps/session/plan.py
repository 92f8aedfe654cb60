"""Plan mode (``--devcaps-profile``): collect and evaluate against a device profile, run nothing,
and report what would run and what would be skipped, and why.

All of plan mode is here: the command-line rewrite that keeps pytest-xdist from starting workers,
the test loop that plans instead of running, and the plan's text (its JSON is
``reporting.write_json_report`` with ``mode="plan"``). Registered by the plugin at configure time
in a session that sets a devcaps option or variable (only those can name a profile); the
command-line rewrite is called by the plugin's own ``pytest_cmdline_main`` wrapper.

PyTorch-style suites are planned for the profile's device types (``plan_pytorch``): the
instances such a host would generate, with PyTorch's gates evaluated against the profile; this
host's own instances are left out. Every test counts once, in the footer as in the total: a
test skipped for two reasons is one group (as the live footer groups it). Expectations files
apply: a skip rule skips, the others are shown with the test.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest

from pytest_devcaps.errors import DevcapsError
from pytest_devcaps.session.resolved import resolve_settings
from pytest_devcaps.session.keys import EVALUATION_KEY, RULE_KEY, session_state
from pytest_devcaps.session.state import SessionState

if TYPE_CHECKING:
    from pytest_devcaps.session.plan_pytorch import PytorchPlan


def plan_in_one_process(config: pytest.Config) -> None:
    """With a profile, no xdist workers: a plan collects and evaluates in this process and runs
    nothing. Sets what ``-n0`` sets; xdist's ``pytest_cmdline_main`` then leaves distribution off
    (the plugin's ``pytest_cmdline_main`` wrapper calls this before xdist's own)."""
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


def _planning(config: pytest.Config) -> bool:
    try:
        state = session_state(config)
    except pytest.UsageError:
        return False
    return bool(state.settings.profile.value) and not state.is_worker


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """In plan mode, every ``instantiate_device_type_tests`` call is recorded from now on
    (before any test module is imported): a plan generates what the profile's host would."""
    if _planning(config):
        from pytest_devcaps.marks.pytorch_instances import start_recording

        start_recording()


def pytest_unconfigure(config: pytest.Config) -> None:
    import sys

    instances = sys.modules.get("pytest_devcaps.marks.pytorch_instances")
    if instances is not None:
        instances.stop_recording()


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    state = session_state(session.config)
    if not state.settings.profile.value or state.is_worker:
        return None
    from pytest_devcaps.session.plan_pytorch import host_instances, plan_pytorch

    expect = session.config.pluginmanager.get_plugin("devcaps-expect")
    expectations = expect.expectations if expect is not None else None
    pytorch = plan_pytorch(session.items, state, expectations)
    plan = plan_items(host_instances(session.items, pytorch)) + pytorch.entries
    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    if tr is not None:
        write_plan(tr, state, plan, pytorch)
    if state.settings.json_path:
        from pytest_devcaps.session.reporting import (
            expectation_fields,
            json_report_path,
            write_json_report,
        )

        path = json_report_path(state)
        if path is not None:
            write_json_report(path, state, plan, exitstatus=0, mode="plan",
                              outcomes={"plan": pytorch.fields(),
                                        **expectation_fields(session.config)})
    return True


def plan_items(items: list[pytest.Item]) -> list[dict[str, Any]]:
    """What would run and what would be skipped (and why), without running: the devcaps
    evaluation, a ``skip`` mark, the expectations rule."""
    from pytest_devcaps.session.plan_pytorch import apply_rule

    plan = []
    for item in items:
        evaluation = item.stash.get(EVALUATION_KEY, None)
        entry: dict[str, Any] = {"nodeid": item.nodeid, "outcome": "would-run"}
        if evaluation is not None:
            entry.update(device=evaluation.device, requires=list(evaluation.required),
                         missing=[m.to_dict() for m in evaluation.missing])
            if evaluation.skip:
                entry["outcome"] = "would-skip"
        rule = item.stash.get(RULE_KEY, None)
        skip = next((m for m in item.iter_markers("skip")), None)
        if skip is not None and entry["outcome"] == "would-run" and rule is None:
            entry.update(outcome="would-skip", reason=str(skip.kwargs.get(
                "reason", skip.args[0] if skip.args else "unconditional skip")))
        if rule is not None:
            apply_rule(entry, rule[0], rule[1])
        plan.append(entry)
    return plan


def entry_reason(entry: dict[str, Any]) -> tuple[str, ...]:
    """What a planned skip is grouped by (every test once): the requirements it misses, as
    one group, else its reason and the gate that gives it."""
    from pytest_devcaps.session.reporting import found_phrase

    missing = entry.get("missing") or []
    if missing:
        return tuple(dict.fromkeys(f"{m['requirement']} on {m['device']}: {found_phrase(m)}"
                                   for m in missing))
    gate = (entry.get("gate") or {}).get("gate")
    return ("", str(entry.get("reason") or "(no reason given)") + (f" ({gate})" if gate else ""))


def _skip_line(entry: dict[str, Any]) -> str:
    if entry.get("missing"):
        reasons = "; ".join(m["reason"] for m in entry["missing"])
    else:
        gate = entry.get("gate") or {}
        where = f" ({gate['gate']}, {gate['source']})" if gate.get("gate") else ""
        reasons = f"{entry.get('reason', '')}{where}"
    return f"SKIP {entry['nodeid']}: {reasons}"


def write_plan(tr: Any, state: SessionState, plan: list[dict[str, Any]],
               pytorch: PytorchPlan | None = None) -> None:
    from pytest_devcaps.session.reporting import group_line

    profile = state.registry.meta.get("profile")
    verbose = tr.config.get_verbosity() > 0
    tr.section(f"devcaps plan for profile {profile}", sep="=")
    groups: Counter[tuple[str, ...]] = Counter()
    for entry in plan:
        if entry["outcome"] == "would-skip":
            groups[entry_reason(entry)] += 1
            tr.line(_skip_line(entry))
        elif verbose:
            tr.line(f"RUN  {entry['nodeid']}")
        if verbose:
            for note in entry.get("notes", ()):
                tr.line(f"     note: {note}")
    for key, count in sorted(groups.items(), key=lambda kv: (-kv[1], kv[0])):
        tr.line(group_line(key, count))
    for line in _plan_notes(plan, pytorch, verbose):
        tr.line(line)
    runs = sum(entry["outcome"] == "would-run" for entry in plan)
    tr.line(f"{runs} would run, {len(plan) - runs} would be skipped on {profile} (nothing was run)"
            + _generated_text(pytorch))


def _plan_notes(plan: list[dict[str, Any]], pytorch: PytorchPlan | None, verbose: bool) -> list[str]:
    lines = [f"note: {note}" for note in (pytorch.notes if pytorch else [])]
    undecided = sum(bool(entry.get("notes")) for entry in plan)
    if undecided and not verbose:
        lines.append(f"note: {undecided} planned test(s) have a gate read with this host's values "
                     "or not known for the profile (-v lists them)")
    lines += [f"MUST PASS {entry['nodeid']}: {entry['must_pass']}" for entry in plan
              if entry.get("must_pass")]
    return lines


def _generated_text(pytorch: PytorchPlan | None) -> str:
    if pytorch is None or not (pytorch.generated or pytorch.left_out):
        return ""
    made = ", ".join(f"{n} {kind}" for kind, n in sorted(pytorch.generated.items())) or "none"
    left = ", ".join(f"{n} {kind}" for kind, n in sorted(pytorch.left_out.items()))
    return (f"; PyTorch device-generic tests generated as the profile's host would: {made}; "
            f"this host's own instances left out: {left}")
