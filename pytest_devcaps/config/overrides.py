"""User override files: fix capability answers for matching devices.

Schema::

    devcaps: 1
    overrides:
      - match: {vendor: nvidia, arch: [sm_90, sm_100]}   # fact == value; a list = any of
        when: "cuda_version >= '12.8'"                    # optional rule expression (AND)
        set:
          dtype.fp8_e4m3fn: unsupported
          attention.flash: {level: emulated, reason: "driver bug 1234"}

An entry without ``match`` and ``when`` applies to every device. When the matched fact is
itself a list (``isa``), the entry matches if any listed value is in it.

``match:`` keys and ``when:`` names are device facts (:mod:`pytest_devcaps.config.facts`); any other
name (``device_type``, ``vendr``) is an error naming the closest fact. Version facts
(``cuda_version``, ``torch_version``, ``runtime_version``...) compare as versions: in
``when:`` a number literal is read as written (``cuda_version >= 12.10`` is version 12.10),
while a ``match:`` value must be quoted (``cuda_version: "12.10"``), because YAML has already
read an unquoted 12.10 as the number 12.1; an unquoted decimal there is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from pytest_devcaps.config.catalogue import Catalogue, RuleVerdict, capability_key, parse_verdict
from pytest_devcaps.config.expressions import Expression, compile_expression, contains, facts_equal
from pytest_devcaps.config.yamlsource import (
    FrozenMap,
    Where,
    check_document,
    check_fact_name,
    check_keys,
    expect_list,
    expect_mapping,
    expect_scalars,
    expect_str,
    items,
    line_of,
    check_version_values,
    read_yaml_file,
)
from pytest_devcaps.model import DeviceIdentity

if TYPE_CHECKING:
    from pytest_devcaps.config.facts import FactVocabulary


@dataclass(frozen=True)
class OverrideEntry:
    """One ``overrides:`` item: which devices it matches and the answers it sets."""

    file: str
    line: int | None
    match: Mapping[str, tuple[Any, ...]]
    when: Expression | None
    settings: Mapping[str, RuleVerdict]

    def matches(self, identity: DeviceIdentity) -> bool:
        """True when every ``match`` fact has one of its values and ``when`` holds."""
        return device_matches(self.match, self.when, identity)


def device_matches(match: Mapping[str, tuple[Any, ...]], when: Expression | None,
                   identity: DeviceIdentity) -> bool:
    """The ``match:`` / ``when:`` pair of an override entry (and of an expectations entry):
    every ``match`` fact has one of its values and ``when`` holds."""
    facts = identity.rule_facts()
    for name, accepted in match.items():
        if not any(fact_matches(facts.get(name), value) for value in accepted):
            return False
    return when is None or when.evaluate(facts)


def fact_matches(actual: Any, expected: Any) -> bool:
    """``match:`` semantics: equality, or membership when the fact is a list (``isa``)."""
    if isinstance(actual, (list, tuple)) and not isinstance(expected, (list, tuple)):
        return contains(actual, expected)
    return facts_equal(actual, expected)


def parse_match(value: Any, where: Where, facts: FactVocabulary) -> Mapping[str, tuple[Any, ...]]:
    """A ``match:`` mapping: fact name -> scalar or list of scalars (any of)."""
    expect_mapping(value, where)
    parsed: dict[str, tuple[Any, ...]] = {}
    for name, accepted, fact_where in items(value, where):
        check_fact_name(name, fact_where, facts)
        options = expect_scalars(accepted, fact_where)
        if not options:
            raise fact_where.error("expected a value or a non-empty list of values")
        check_version_values(name, options, fact_where, facts)
        parsed[name] = tuple(options)
    return FrozenMap(parsed)


def parse_selection(entry: Mapping[str, Any], where: Where, facts: FactVocabulary
                    ) -> tuple[Mapping[str, tuple[Any, ...]], Expression | None]:
    """An entry's ``match:`` and ``when:`` (either may be absent: every device)."""
    match: Mapping[str, tuple[Any, ...]] = FrozenMap({})
    if entry.get("match") is not None:
        match = parse_match(entry["match"], where.child(entry, "match"), facts)
    when = None
    if "when" in entry:
        when_where = where.child(entry, "when")
        text = expect_str(entry["when"], when_where)
        when = compile_expression(text, file=when_where.file, line=when_where.line,
                                  key=when_where.key, facts=facts)
    return match, when


def _parse_entry(entry: Any, where: Where, catalogue: Catalogue,
                 facts: FactVocabulary) -> OverrideEntry:
    expect_mapping(entry, where)
    check_keys(entry, where, allowed={"match", "when", "set"}, required={"set"})
    match, when = parse_selection(entry, where, facts)
    set_where = where.child(entry, "set")
    body = expect_mapping(entry["set"], set_where)
    if not body:
        raise set_where.error("expected at least one 'capability: level' entry")
    settings: dict[str, RuleVerdict] = {}
    for capability, value, cap_where in items(body, set_where):
        capability_key(capability, cap_where, catalogue.capabilities)
        settings[capability] = parse_verdict(value, cap_where,
                                             f"set in {where.file}:{cap_where.line}")
    return OverrideEntry(file=where.file, line=where.line, match=match, when=when,
                         settings=FrozenMap(settings))


def parse_overrides(document: Any, source: str, catalogue: Catalogue,
                    facts: FactVocabulary | None = None) -> list[OverrideEntry]:
    """Validate one parsed override document; ``facts`` defaults to the builtin vocabulary."""
    from pytest_devcaps.config.facts import builtin_vocabulary

    vocabulary = builtin_vocabulary() if facts is None else facts
    check_document(document, source, body_keys={"overrides"}, required={"overrides"})
    where = Where(source, line_of(document), "").child(document, "overrides")
    entries = expect_list(document["overrides"], where)
    return [_parse_entry(entry, where.child(entries, index), catalogue, vocabulary)
            for index, entry in enumerate(entries)]


def load_overrides(paths: Sequence[str | Path], catalogue: Catalogue,
                   facts: FactVocabulary | None = None) -> list[OverrideEntry]:
    """All entries of the given files, in file order then entry order (later ones win).

    ``match:`` keys and ``when:`` names must be facts of ``facts`` (default: the builtin
    backends' vocabulary; the registry passes the one with hook backends).
    """
    entries: list[OverrideEntry] = []
    for path in paths:
        document, source, _ = read_yaml_file(path)
        entries.extend(parse_overrides(document, source, catalogue, facts))
    return entries
