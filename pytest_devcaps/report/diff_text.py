"""A diff of two runs (:mod:`pytest_devcaps.report.diff`) as text, Markdown (a PR comment), JSON
and GitHub workflow annotations (``::error file=...::``). Standard library only."""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping

from pytest_devcaps.report.diff import KINDS, TITLES

#: The annotation level of each list (GitHub shows error, warning and notice).
LEVELS = {"newly_failing": "error", "newly_skipped": "warning", "gone": "warning",
          "newly_passing": "notice", "reason_changed": "notice"}


def _summary(diff: Mapping[str, Any]) -> str:
    counts = diff["summary"]
    return ", ".join(f"{counts[kind]} {TITLES[kind].split(' (')[0]}" for kind in KINDS)


def _limits(diff: Mapping[str, Any]) -> list[str]:
    if diff["complete"]:
        return []
    return ["note: a fleet document keeps only its failing tests: against it, passing now means "
            "no longer failing, and newly skipped, reason changed, gone and new are not known"]


def _verdict(diff: Mapping[str, Any], regressions: int) -> str:
    return (f"REGRESSION: {regressions} change(s) counted as regressions" if regressions
            else "no regression")


def as_text(diff: Mapping[str, Any], regressions: int) -> str:
    lines = [f"devcaps report diff: {diff['base']} -> {diff['new']}"]
    for row in diff["devices"]:
        lines.append(f"{row['device']}:")
        for kind in KINDS:
            if row[kind]:
                lines.append(f"  {TITLES[kind]} ({len(row[kind])}):")
                lines += [f"    {c['nodeid']}  {c['before']} -> {c['after']}"
                          + (f": {c['detail']}" if c["detail"] else "") for c in row[kind]]
    if not diff["devices"]:
        lines.append("no test changed")
    lines += _limits(diff)
    lines += [f"summary: {_summary(diff)}", _verdict(diff, regressions)]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ").replace("`", "'")


def as_markdown(diff: Mapping[str, Any], regressions: int) -> str:
    icon = ":x:" if regressions else ":white_check_mark:"
    lines = [f"### devcaps: {icon} {_verdict(diff, regressions)}", "",
             f"`{_cell(diff['base'])}` → `{_cell(diff['new'])}`: {_summary(diff)}", ""]
    for row in diff["devices"]:
        lines += [f"#### {_cell(row['device'])}", "", "| change | test | before | after | detail |",
                  "| --- | --- | --- | --- | --- |"]
        for kind in KINDS:
            lines += [f"| {TITLES[kind]} | `{_cell(c['nodeid'])}` | {c['before']} | {c['after']} "
                      f"| {_cell(c['detail'])} |" for c in row[kind]]
        lines.append("")
    lines += [f"_{line}_" for line in _limits(diff)]
    return "\n".join(lines).rstrip() + "\n"


def as_json(diff: Mapping[str, Any], regressions: int) -> str:
    return json.dumps({**diff, "regressions": regressions, "passed": not regressions},
                      indent=1, sort_keys=True) + "\n"


def _escape(text: str, *, property_: bool = False) -> str:
    """GitHub's workflow-command escaping (``%``, CR, LF; in properties also ``:`` and ``,``)."""
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if property_ else text


def as_github(diff: Mapping[str, Any], regressions: int) -> str:
    lines = []
    for row in diff["devices"]:
        for kind in KINDS:
            level = LEVELS.get(kind)
            for change in row[kind] if level else ():
                path = change["nodeid"].partition("::")[0]
                title = f"{TITLES[kind]} on {row['device']}"
                message = (f"{change['nodeid']}: {change['before']} -> {change['after']}"
                           + (f": {change['detail']}" if change["detail"] else ""))
                lines.append(f"::{level} file={_escape(path, property_=True)},"
                             f"title={_escape(title, property_=True)}::{_escape(message)}")
    lines.append(f"::{'error' if regressions else 'notice'} title=devcaps report diff::"
                 f"{_escape(_verdict(diff, regressions) + ': ' + _summary(diff))}")
    return "\n".join(lines) + "\n"


FORMATTERS: Mapping[str, Callable[[Mapping[str, Any], int], str]] = {
    "text": as_text, "markdown": as_markdown, "json": as_json, "github": as_github}
