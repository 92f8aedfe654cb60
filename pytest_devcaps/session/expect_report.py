"""The expectations footer: what the file's rules did in this run, each test once.

Read from pytest's own terminal statistics (xdist workers' reports included) and the rule each
report carries in ``user_properties``: expected failures by reason (the issue with it), the ones
that passed (candidates to take out of the file), strict ones that passed (failures), must-pass
tests that did not pass, and the stale rules.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:
    from pytest_devcaps.config.expectfile import Expectations

EXPECTATION_PROPERTY = "devcaps_expectation"
"""The ``user_properties`` entry of a test an expectations rule decides (the rule, its device)."""

#: (terminal category, label, what it means), in the order the footer lists them.
_KINDS = (
    ("xfailed", "xfailed", ""),
    ("xpassed", "XPASS", "passes now: take it out of the file"),
    ("strict", "XPASS(strict)", "passes now: a failure of this run; take it out of the file"),
    ("must-pass", "NOT PASSED", "a must-pass test did not pass"),
)


def _rule_of(report: Any) -> Mapping[str, Any] | None:
    for name, value in getattr(report, "user_properties", ()):
        if name == EXPECTATION_PROPERTY and isinstance(value, dict):
            return value
    return None


def _kind(category: str, report: Any, rule: Mapping[str, Any]) -> str | None:
    outcome = rule.get("outcome")
    if outcome == "xfail" and category in ("xfailed", "xpassed"):
        return category
    text = str(getattr(report, "longrepr", "") or "")
    if outcome == "xfail" and category == "failed" and text.startswith("[XPASS(strict)]"):
        return "strict"
    if outcome == "pass" and category in ("failed", "error") and text.startswith("must pass on"):
        return "must-pass"
    return None


def outcome_groups(stats: Mapping[str, Sequence[Any]]) -> Counter[tuple[str, str]]:
    """(kind, the rule's text) -> tests, every test once (its call report, or its setup's)."""
    groups: Counter[tuple[str, str]] = Counter()
    for category in ("xfailed", "xpassed", "failed", "error"):
        for report in stats.get(category, ()):
            rule = _rule_of(report)
            if rule is None or not getattr(report, "count_towards_summary", True):
                continue
            kind = _kind(category, report, rule)
            if kind is not None:
                groups[(kind, _describe(rule))] += 1
    return groups


def _describe(rule: Mapping[str, Any]) -> str:
    where = f"{rule.get('file')}:{rule.get('line')}"
    text = rule.get("reason") or rule.get("test")
    issue = f" [issue: {rule['issue']}]" if rule.get("issue") else ""
    return f"{rule.get('device')}: {where}: {text}{issue}"


def stale_line(rule: Mapping[str, Any]) -> str:
    return (f"stale: {rule['file']}:{rule['line']}: {rule['outcome']} {rule['test']!r} selects "
            f"no collected test on {', '.join(rule['devices'])}")


def summary_lines(expectations: Expectations, stats: Mapping[str, Sequence[Any]],
                  stale: Sequence[Mapping[str, Any]], *, strict: bool) -> list[str]:
    groups = outcome_groups(stats)
    lines = []
    for kind, label, meaning in _KINDS:
        for (found, text), count in sorted(groups.items(), key=lambda kv: (-kv[1], kv[0])):
            if found == kind:
                lines.append(f"{count:5d}  {label}  {text}" + (f"  ({meaning})" if meaning else ""))
    lines += [stale_line(rule) for rule in stale]
    if stale:
        verdict = ("the run fails (--devcaps-expect-strict)" if strict else
                   "an error under --devcaps-expect-strict")
        lines.append(f"{len(stale)} stale rule(s) in {', '.join(expectations.files)}: {verdict}")
    return lines
