"""Expectations files: what a device is known to do with named tests (a backend's bring-up list).

Schema (``devcaps: 1`` at the top is optional here; when given it must be 1)::

    expectations:
      - match: {device_type: cpu}        # the overrides' match: (device_type = the type fact),
        when: "torch_version >= '2.13'"  # vendor, arch, any device or profile fact; optional
        default: run                     # tests no rule names: run (default), pass, skip, xfail
        xfail:
          - test: "test_ops.py::test_rounding"
            reason: "round-half-even differs"
            issue: "https://github.com/acme/backend/issues/12"
            strict: true                 # a pass is a failure (default false)
        skip:
          - test: ["test_ops.py::test_huge*", "TestBig"]
            reason: "needs 80 GB"
        flaky:
          - test: "test_ops.py::test_timing"
            reruns: 2                    # (pytest-rerunfailures), delay: seconds between them
        pass:
          - "test_ops.py::test_add"      # must pass: a skip or an xfail is an error

Tests are named as :mod:`pytest_devcaps.config.testnames` says (node ids, ``Class::method``,
globs, PyTorch's generated and generic names). ``skip`` and ``xfail`` need a ``reason``; any rule
may carry an ``issue`` (a link or a tracker id), which goes wherever its reason goes.

Later wins: the files in the order given, then entries in file order, then rules by line; a
test no rule of a matching entry names gets the ``default`` of the last matching entry that has
one. A bad key is a :class:`~pytest_devcaps.errors.ConfigError` naming ``file:line``, the key
and the closest valid one; ``match:`` and ``when:`` are parsed by the overrides' own functions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Sequence

from pytest_devcaps.config.expressions import Expression
from pytest_devcaps.config.overrides import device_matches, parse_selection
from pytest_devcaps.config.testnames import TestName, glob_regex, is_glob
from pytest_devcaps.config.yamlsource import (
    SCHEMA_VERSION,
    LineDict,
    Where,
    check_keys,
    expect_int,
    expect_list,
    expect_mapping,
    expect_number,
    expect_str,
    line_of,
    read_yaml_file,
)
from pytest_devcaps.errors import short_repr
from pytest_devcaps.model import DeviceIdentity

if TYPE_CHECKING:
    from pytest_devcaps.config.facts import FactVocabulary

OUTCOMES = ("xfail", "skip", "flaky", "pass")
DEFAULTS = ("run", "pass", "skip", "xfail")
"""What an entry's ``default:`` may say for the tests none of its rules name."""
DEFAULT_PATTERN = "(every other test)"
"""The pattern of an entry's default (it selects the tests no rule names)."""

_COMMON = {"test", "reason", "issue"}
RULE_KEYS: Mapping[str, frozenset[str]] = {
    "xfail": frozenset(_COMMON | {"strict"}), "skip": frozenset(_COMMON),
    "flaky": frozenset(_COMMON | {"reruns", "delay"}), "pass": frozenset(_COMMON)}
NEEDS_REASON = frozenset({"xfail", "skip"})
ENTRY_KEYS = frozenset({"match", "when", "default", *OUTCOMES})
#: ``device_type`` (PyTorch's word) is the ``type`` fact in a ``match:``.
MATCH_SYNONYMS = {"device_type": "type"}
MAX_RERUNS = 100


@dataclass(frozen=True)
class Expectation:
    """One rule: the tests a pattern selects have this outcome on the entry's devices."""

    outcome: str
    pattern: str
    file: str
    line: int | None
    reason: str = ""
    issue: str | None = None
    strict: bool = False
    reruns: int = 0
    delay: float = 0.0

    @property
    def where(self) -> str:
        return self.file if self.line is None else f"{self.file}:{self.line}"

    @property
    def is_default(self) -> bool:
        return self.pattern == DEFAULT_PATTERN

    def explain(self) -> str:
        """The reason and the issue: ``round-half-even differs [issue: https://...]`` (empty
        for a ``pass`` rule that gives neither)."""
        text = self.reason or (f"rerun up to {self.reruns} times" if self.outcome == "flaky" else "")
        issue = f"[issue: {self.issue}]" if self.issue else ""
        return " ".join(part for part in (text, issue) if part)

    def text(self, device: str) -> str:
        """What a report says: ``expected failure on cpu (expect.yaml:5): why [issue: ...]``."""
        kind = {"xfail": "expected failure", "skip": "expected skip", "flaky": "flaky",
                "pass": "must pass"}[self.outcome]
        explained = self.explain()
        return f"{kind} on {device} ({self.where})" + (f": {explained}" if explained else "")

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"outcome": self.outcome, "test": self.pattern,
                                "file": self.file, "line": self.line}
        for key, value in (("reason", self.reason), ("issue", self.issue)):
            if value:
                data[key] = value
        if self.outcome == "xfail":
            data["strict"] = self.strict
        if self.outcome == "flaky":
            data.update(reruns=self.reruns, delay=self.delay)
        return data


@dataclass(frozen=True)
class ExpectationEntry:
    """One ``expectations:`` item: which devices, its rules in line order, its default."""

    file: str
    line: int | None
    match: Mapping[str, tuple[Any, ...]]
    when: Expression | None
    rules: tuple[Expectation, ...]
    default: Expectation | None = None

    def applies(self, identity: DeviceIdentity) -> bool:
        return device_matches(self.match, self.when, identity)


@dataclass
class _Index:
    """An entry's rules by pattern: literal forms looked up, globs matched."""

    literal: dict[str, int] = field(default_factory=dict)
    globs: list[tuple[int, Any]] = field(default_factory=list)

    def selecting(self, name: TestName) -> list[int]:
        """The positions of the rules that select ``name``, in line order (the last decides)."""
        found = {self.literal[form] for form in name.forms if form in self.literal}
        found.update(i for i, regex in self.globs if any(regex.fullmatch(f) for f in name.forms))
        return sorted(found)


class Expectations:
    """Every entry of the files given, in order; ``lookup`` finds the rule that decides a test."""

    def __init__(self, entries: Sequence[ExpectationEntry], files: Sequence[str] = ()) -> None:
        self.entries = tuple(entries)
        self.files = tuple(files) or tuple(dict.fromkeys(e.file for e in self.entries))
        self._indexes = [_index(entry) for entry in self.entries]
        self._applying: dict[tuple[Any, ...], tuple[int, ...]] = {}

    def __bool__(self) -> bool:
        return bool(self.entries)

    def rules(self) -> Iterator[Expectation]:
        """Every rule of every entry (defaults not included), in precedence order."""
        for entry in self.entries:
            yield from entry.rules

    def applying(self, identity: DeviceIdentity) -> tuple[int, ...]:
        """Indexes of the entries whose ``match:`` / ``when:`` hold on ``identity``."""
        key = (identity.key, identity.vendor, identity.name, identity.arch)  # one device
        found = self._applying.get(key)
        if found is None:
            found = tuple(i for i, e in enumerate(self.entries) if e.applies(identity))
            self._applying[key] = found
        return found

    def selecting(self, name: TestName, identity: DeviceIdentity) -> list[Expectation]:
        """Every rule that selects ``name`` on ``identity``, in precedence order (the last one
        decides); an entry's default when no rule does (the last applying one with a default)."""
        applying = self.applying(identity)
        found = [self.entries[index].rules[position] for index in applying
                 for position in self._indexes[index].selecting(name)]
        if found:
            return found
        for index in reversed(applying):
            default = self.entries[index].default
            if default is not None:
                return [default]
        return []

    def lookup(self, name: TestName, identity: DeviceIdentity) -> Expectation | None:
        """The rule that decides ``name`` on ``identity`` (see :meth:`selecting`); None: none."""
        found = self.selecting(name, identity)
        return found[-1] if found else None


def _index(entry: ExpectationEntry) -> _Index:
    index = _Index()
    for position, rule in enumerate(entry.rules):
        if is_glob(rule.pattern):
            index.globs.append((position, glob_regex(rule.pattern)))
        else:
            index.literal[rule.pattern] = position  # a pattern listed twice: the later line
    return index


# -- parsing -----------------------------------------------------------------------------------

def _patterns(value: Any, where: Where) -> list[tuple[str, int | None]]:
    """``test:`` as one pattern or a list of them, each with its line."""
    values = expect_list(value, where) if isinstance(value, list) else [value]
    found = []
    for i, pattern in enumerate(values):
        spot = where.child(values, i) if isinstance(value, list) else where
        text = expect_str(pattern, spot).strip()
        found.append((text, spot.line))
    if not found:
        raise where.error("expected a test id or pattern, or a non-empty list of them")
    return found


def _rule_fields(outcome: str, item: Mapping[str, Any], where: Where) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for key in ("reason", "issue"):
        if key in item:
            fields[key] = expect_str(item[key], where.child(item, key)).strip()
    if outcome in NEEDS_REASON and not fields.get("reason"):
        raise where.error(f"a {outcome} rule needs reason: \"why it is expected on these devices\"")
    if "strict" in item:
        strict = item["strict"]
        if not isinstance(strict, bool):
            raise where.child(item, "strict").error(f"expected true or false, found {short_repr(strict)}")
        fields["strict"] = strict
    if outcome == "flaky":
        reruns_where = where.child(item, "reruns")
        fields["reruns"] = expect_int(item.get("reruns", 1), reruns_where, minimum=1)
        if fields["reruns"] > MAX_RERUNS:
            raise reruns_where.error(f"at most {MAX_RERUNS} reruns, found {fields['reruns']}")
        if "delay" in item:
            delay = expect_number(item["delay"], where.child(item, "delay"))
            if delay < 0:
                raise where.child(item, "delay").error(f"must be at least 0, found {delay}")
            fields["delay"] = float(delay)
    return fields


def _parse_rules(outcome: str, value: Any, where: Where) -> list[Expectation]:
    rules = []
    for i, item in enumerate(expect_list(value, where)):
        spot = where.child(value, i)
        if isinstance(item, str):
            item = LineDict(test=item)
            item.line = spot.line
            item.lines["test"] = spot.line or 0
        expect_mapping(item, spot)
        check_keys(item, spot, allowed=RULE_KEYS[outcome], required={"test"})
        fields = _rule_fields(outcome, item, spot)
        for pattern, line in _patterns(item["test"], spot.child(item, "test")):
            rules.append(Expectation(outcome, pattern, spot.file, line, **fields))
    return rules


def _parse_default(value: Any, where: Where) -> Expectation | None:
    """``default: skip`` or ``default: {outcome: skip, reason: ..., issue: ...}``."""
    if isinstance(value, dict):
        check_keys(value, where, allowed={"outcome", "reason", "issue", "strict"},
                   required={"outcome"})
        outcome = value["outcome"]
        spot = where.child(value, "outcome")
    else:
        outcome, spot, value = value, where, {}
    if outcome not in DEFAULTS:
        from pytest_devcaps.errors import did_you_mean

        raise spot.error(f"unknown default {short_repr(outcome)}"
                         f"{did_you_mean(str(outcome), DEFAULTS)}; expected one of "
                         f"{', '.join(DEFAULTS)}")
    if outcome == "run":
        return None
    fields = _rule_fields(outcome, value, where) if value else {}
    if outcome in NEEDS_REASON and not fields.get("reason"):
        fields["reason"] = f"not listed in {where.file} (default: {outcome})"
    return Expectation(outcome, DEFAULT_PATTERN, where.file, where.line, **fields)


def _match_with_synonyms(match: Any, where: Where) -> Any:
    """``match:`` with ``device_type`` read as the ``type`` fact (lines kept)."""
    if not isinstance(match, LineDict) or not any(k in match for k in MATCH_SYNONYMS):
        return match
    renamed = LineDict()
    renamed.line = match.line
    for key, value in match.items():
        name = MATCH_SYNONYMS.get(key, key)
        if name in renamed:
            other = next(k for k in match if k != key and MATCH_SYNONYMS.get(k, k) == name)
            raise where.child(match, key).error(f"{other!r} and {key!r} name the same fact")
        renamed[name] = value
        renamed.lines[name] = match.lines.get(key, match.line or 0)
    return renamed


def _parse_entry(entry: Any, where: Where, facts: FactVocabulary) -> ExpectationEntry:
    expect_mapping(entry, where)
    check_keys(entry, where, allowed=ENTRY_KEYS)
    if not any(key in entry for key in (*OUTCOMES, "default")):
        raise where.error(f"an entry lists tests under {', '.join(OUTCOMES)} or sets a default")
    selection = dict(entry)
    if "match" in entry:
        selection["match"] = _match_with_synonyms(entry["match"], where.child(entry, "match"))
    match, when = parse_selection(_lined(selection, entry), where, facts)
    rules: list[Expectation] = []
    for outcome in OUTCOMES:
        if outcome in entry:
            rules += _parse_rules(outcome, entry[outcome], where.child(entry, outcome))
    rules.sort(key=lambda rule: rule.line or 0)
    default = _parse_default(entry["default"], where.child(entry, "default")) \
        if "default" in entry else None
    return ExpectationEntry(where.file, where.line, match, when, tuple(rules), default)


def _lined(values: dict[str, Any], original: LineDict) -> LineDict:
    copy = LineDict(values)
    copy.line, copy.lines = original.line, dict(original.lines)
    return copy


def parse_expectations(document: Any, source: str,
                       facts: FactVocabulary | None = None) -> list[ExpectationEntry]:
    """The entries of one parsed expectations document (``facts``: the builtin vocabulary
    unless given)."""
    from pytest_devcaps.config.facts import builtin_vocabulary

    vocabulary = builtin_vocabulary() if facts is None else facts
    top = Where(source, line_of(document), "")
    if document is None:
        raise top.error("the file is empty; expected 'expectations:' with a list of entries")
    expect_mapping(document, top)
    check_keys(document, top, allowed={"devcaps", "expectations"}, required={"expectations"})
    version = document.get("devcaps", SCHEMA_VERSION)
    if isinstance(version, bool) or version != SCHEMA_VERSION:
        raise top.child(document, "devcaps").error(
            f"unsupported schema version {short_repr(version)}; this pytest-devcaps reads "
            f"version {SCHEMA_VERSION}")
    where = top.child(document, "expectations")
    entries = expect_list(document["expectations"], where)
    return [_parse_entry(entry, where.child(entries, i), vocabulary)
            for i, entry in enumerate(entries)]


def load_expectations(paths: Iterable[str | Path],
                      facts: FactVocabulary | None = None) -> Expectations:
    """Every entry of the files, in order (later ones win)."""
    entries: list[ExpectationEntry] = []
    files = []
    for path in paths:
        document, source, _ = read_yaml_file(path)
        entries += parse_expectations(document, source, facts)
        files.append(source)
    return Expectations(entries, files)
