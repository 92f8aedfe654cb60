"""Expectations files written out, and PyTorch's ``test_exclusions`` in and out.

* :func:`expectations_yaml`: a file from entries (``devcaps report expect --from NEW.json``
  writes a run's failures as xfail rules: how a team starts one).
* :func:`to_test_exclusions`: the skip rules that apply to one device as PyTorch's form, what a
  device test base takes (``CUDATestBase.set_test_configs(test_exclusions=...)``; torch 2.13's
  ``DeviceTypeTestBase.test_exclusions``: ``{"TestClass": "*" | ["test_a", ...]}``, keyed by the
  generic class and naming generic tests, ``instantiate_device_type_tests`` then generates none
  of them). A rule this form cannot say (one dtype's instance, a glob inside a name, a test
  without its class) is left out with the reason.
* :func:`from_test_exclusions`: such a mapping as skip rules for that device type.

Strings are written as JSON strings, which YAML reads as double-quoted scalars.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from pytest_devcaps.config.expectfile import Expectations
from pytest_devcaps.config.testnames import is_glob
from pytest_devcaps.model import DeviceIdentity

HEADER = "# pytest-devcaps expectations (--devcaps-expect / PYTEST_DEVCAPS_EXPECT)\n"


@dataclass(frozen=True)
class EntryDraft:
    """An entry to write: its ``match:`` facts, its rules by outcome, a comment above it."""

    match: Mapping[str, Any]
    rules: Mapping[str, Sequence[Mapping[str, Any]]]
    comment: str = ""


def expectations_yaml(entries: Iterable[EntryDraft], header: str = "") -> str:
    """The file's text: one entry per draft, rules in the order given."""
    lines = [HEADER.rstrip("\n")] + [f"# {line}" for line in header.splitlines()]
    lines.append("expectations:")
    for entry in entries:
        if entry.comment:
            lines += [f"  # {line}" for line in entry.comment.splitlines()]
        facts = ", ".join(f"{key}: {json.dumps(value)}" for key, value in entry.match.items())
        lines.append(f"  - match: {{{facts}}}" if facts else "  - match: {}")
        for outcome, rules in entry.rules.items():
            if not rules:
                continue
            lines.append(f"    {outcome}:")
            for rule in rules:
                first = True
                for key, value in rule.items():
                    if key.startswith("#"):
                        lines.append(f"        # {value}")
                        continue
                    lines.append(f"      {'- ' if first else '  '}{key}: {json.dumps(value)}")
                    first = False
    return "\n".join(lines) + "\n"


# -- PyTorch's test_exclusions ----------------------------------------------------------------

def _generic_parts(pattern: str, device_type: str) -> tuple[str, str | None] | str:
    """(generic class, generic test or None for the whole class) a skip pattern names, or why
    the form cannot say it."""
    parts = pattern.split("::")
    if parts[0].endswith(".py"):
        parts = parts[1:]
    if not parts or is_glob(parts[0]) or not parts[0][:1].isupper():
        return "test_exclusions is keyed by a test class: this pattern names none"
    cls = parts[0]
    suffix = device_type.upper()
    if cls.endswith(suffix) and len(cls) > len(suffix):
        cls = cls[: -len(suffix)]
    if len(parts) == 1 or parts[1] == "*":
        return cls, None
    if len(parts) > 2 or is_glob(parts[1]) or "[" in parts[1]:
        return "test_exclusions names whole generic tests: a glob or parametrization cannot be said"
    name = parts[1]
    marker = f"_{device_type}"
    if marker in name:
        head, _, rest = name.rpartition(marker)
        if rest:  # test_x_cuda_float32: one dtype's instance
            return (f"{pattern!r} is one dtype's instance; test_exclusions (torch 2.13) would "
                    "exclude every dtype of the test")
        name = head
    return cls, name


def to_test_exclusions(expectations: Expectations, identity: DeviceIdentity
                       ) -> tuple[dict[str, Any], list[str]]:
    """The skip rules of the entries that apply to ``identity`` as ``test_exclusions``, and a
    line for each rule left out (and why)."""
    found: dict[str, Any] = {}
    left_out: list[str] = []
    for index in expectations.applying(identity):
        for rule in expectations.entries[index].rules:
            if rule.outcome != "skip":
                continue
            parts = _generic_parts(rule.pattern, identity.type)
            if isinstance(parts, str):
                left_out.append(f"{rule.where}: {rule.pattern}: {parts}")
                continue
            cls, name = parts
            if name is None or found.get(cls) == "*":
                found[cls] = "*"
            else:
                names = found.setdefault(cls, [])
                if name not in names:
                    names.append(name)
    return found, left_out


def from_test_exclusions(mapping: Any, device_type: str, source: str) -> tuple[EntryDraft, list[str]]:
    """``{"TestClass": "*" | [names] | {name: ...}}`` as an entry of skip rules for
    ``device_type`` (the reason names ``source``), and what could not be read."""
    problems = []
    rules: list[dict[str, Any]] = []
    if not isinstance(mapping, dict):
        return EntryDraft({"device_type": device_type}, {}), [
            f"{source}: expected a mapping of test classes, found {type(mapping).__name__}"]
    for cls, tests in mapping.items():
        reason = f"excluded by {source} (test_exclusions of the {device_type} test base)"
        if tests == "*":
            rules.append({"test": str(cls), "reason": reason})
        elif isinstance(tests, (list, tuple, dict)):
            rules += [{"test": f"{cls}::{name}", "reason": reason} for name in tests]
        else:
            problems.append(f"{source}: {cls}: expected \"*\", a list or a mapping of test names")
    return EntryDraft({"device_type": device_type}, {"skip": rules},
                      f"read from {source}"), problems


def failure_rules(tests: Iterable[Mapping[str, Any]], *, strict: bool, origin: str
                  ) -> list[dict[str, Any]]:
    """xfail rules for the failing tests of a report (``tests`` as the JSON report has them)."""
    rules = []
    for test in tests:
        reason = str(test.get("reason") or "failed").strip().split("\n", 1)[0]
        rules.append({"test": test["nodeid"], "reason": f"{test.get('outcome')} in {origin}: "
                      f"{reason}"[:300], "strict": strict,
                      "#": "issue: \"<link to the tracking issue>\""})
    return rules
