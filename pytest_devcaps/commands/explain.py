"""``devcaps probe --explain CAP``: how one capability's answer was reached on each device.

For every device: the vendor rules tried in order (file:line, the ``when`` with the device's
fact values put in, true or false), the rule that fired with its level, reason and source, the
probe's own outcome, the answers of every precedence layer (lowest first, from
:attr:`CapabilityRecord.history`) and the final answer; an ``unknown`` answer ends with what
would decide it. Printing only, no pytest import (like :mod:`pytest_devcaps.report.table`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from pytest_devcaps.config.catalogue import ANY_VENDOR, first_matching_rule, format_fact
from pytest_devcaps.model import (
    IMPLIES_SOURCE,
    PROBE_SOURCE,
    RULE_SOURCE,
    UNANSWERED_SOURCE,
    CapabilityRecord,
    DeviceIdentity,
    Level,
)

if TYPE_CHECKING:
    from pytest_devcaps.config.catalogue import Catalogue, VendorRule
    from pytest_devcaps.config.expressions import Expression
    from pytest_devcaps.model import ProbeOutcome
    from pytest_devcaps.registry import CapabilityRegistry, RegistryOptions

_STRING_LITERAL = re.compile(r"""('[^']*'|"[^"]*")""")


@dataclass(frozen=True)
class ProbeNote:
    """What the probe of one capability did on one device: its outcome, or why it did not run."""

    outcome: ProbeOutcome | None
    note: str


def substitute_facts(expression: Expression, facts: Mapping[str, Any]) -> str:
    """``compute_capability >= 8.0`` -> ``9.0 >= 8.0``: each fact name replaced by its value
    (``missing`` when the device does not report it); string literals are left alone."""
    def value(name: str) -> str:
        return _literal(facts[name]) if name in facts else "missing"

    names = sorted(expression.names, key=len, reverse=True)
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b") if names else None
    text = " ".join(expression.text.split())
    parts = _STRING_LITERAL.split(text)
    for index in range(0, len(parts), 2):  # even parts are outside string literals
        if pattern is not None:
            parts[index] = pattern.sub(lambda match: value(match.group(1)), parts[index])
    return "".join(parts)


def _literal(fact: Any) -> str:
    """A fact written as the rule expression would write it (``'sm_90'``, ``['avx2', 'neon']``)."""
    if isinstance(fact, str):
        return repr(fact)
    if isinstance(fact, (list, tuple)):
        return "[" + ", ".join(_literal(item) for item in fact) + "]"
    return format_fact(fact)


def rule_lines(catalogue: Catalogue, identity: DeviceIdentity, capability: str) -> list[str]:
    """The vendor rules for ``capability`` tried in order, up to and including the one that fired."""
    facts = identity.rule_facts()
    vendor = str(identity.vendor).lower()
    rules = catalogue.rules_for(vendor, capability)
    if not rules:
        return [f"  rules: none for vendor {vendor!r} (nor for {ANY_VENDOR!r})"]
    fired = first_matching_rule(catalogue, vendor, capability, facts)
    lines = [f"  rules for vendor {vendor!r}, tried in order:"]
    for rule in rules:
        where = f"{rule.file or '<hook>'}:{rule.line if rule.line is not None else '?'}"
        if rule.when is None:
            lines.append(f"    {where}  (no condition: always applies)")
        else:
            verdict = "true" if rule.matches(facts) else "false"
            lines.append(f"    {where}  when {' '.join(rule.when.text.split())}")
            lines.append(f"        with this device's facts: {substitute_facts(rule.when, facts)}"
                         f"  -> {verdict}")
        if rule is fired:
            lines += _fired_lines(rule, facts)
            break
    if fired is None:
        lines.append("    no rule's condition holds for this device")
    return lines


def _fired_lines(rule: VendorRule, facts: Mapping[str, Any]) -> list[str]:
    verdict = rule.verdict(facts)
    return [f"      fired: {verdict.level.value}: {verdict.reason}",
            f"      source: {rule.source or 'not given'}"]


def _probe_lines(capability: str, probe: ProbeNote | None) -> list[str]:
    if probe is None:
        return [f"  probe: none is registered under {capability}"]
    if probe.outcome is None:
        return [f"  probe: {probe.note}"]
    words = "ran the op" if probe.outcome.level is Level.NATIVE else probe.outcome.level.value
    return [f"  probe: {words}: {probe.outcome.reason}"]


def _layer_lines(record: CapabilityRecord) -> list[str]:
    lines = ["  answers, lowest precedence first (rule < probe < profile < override < cli < hook"
             " < implies):"]
    lines += [f"    {entry}" for entry in record.history]
    lines.append(f"    {record.describe()}  <- final")
    return lines


def decision_lines(catalogue: Catalogue, identity: DeviceIdentity, record: CapabilityRecord,
                   probe: ProbeNote | None) -> list[str]:
    """For an ``unknown`` answer: exactly what would decide it."""
    capability = record.capability
    ways: list[str] = []
    if record.source == IMPLIES_SOURCE and record.needs is not None:
        ways.append(f"{record.reason}: decide {record.needs} first "
                    f"(devcaps probe --explain {record.needs})")
    elif record.source == PROBE_SOURCE:
        ways.append(f"the probe could not tell ({record.reason}); rerun it with --reprobe or a "
                    "longer --probe-timeout")
    elif record.source == RULE_SOURCE:
        ways.append(f"the rule says what decides it: {record.reason}")
    elif record.source == UNANSWERED_SOURCE:
        ways.append(_no_rule_decider(catalogue, identity, capability))
    else:  # a profile, override file, --devcaps-set or hook said unknown on purpose
        ways.append(f"{record.source} set it to unknown: change that setting")
    if record.source in (RULE_SOURCE, UNANSWERED_SOURCE) and probe is not None:
        ways.append(_probe_decider(capability, probe))
    ways.append(f"an override file entry (set: {{{capability}: native|emulated|unsupported}}) "
                f"or --devcaps-set {capability}=LEVEL")
    return ["  unknown: what would decide it:"] + [f"    - {way}" for way in ways]


def _no_rule_decider(catalogue: Catalogue, identity: DeviceIdentity, capability: str) -> str:
    vendor = str(identity.vendor).lower()
    rules = catalogue.rules_for(vendor, capability)
    if not rules:
        return (f"a vendor rule: the catalogue has none for vendor {vendor!r} and {capability} "
                f"(add one under vendors.{vendor}.{capability})")
    facts = identity.rule_facts()
    missing = sorted({name for rule in rules if rule.when is not None
                      for name in rule.when.names if facts.get(name) is None})
    lines = ", ".join(str(rule.line) for rule in rules)
    if missing:
        return (f"the facts the rules test (lines {lines}): this device does not report "
                f"{', '.join(missing)}; a device (or profile) reporting them is decided by the rules")
    return f"a rule for these facts: none of the rules on lines {lines} holds"


def _probe_decider(capability: str, probe: ProbeNote) -> str:
    if probe.outcome is None:
        return (f"running the probe registered under {capability} on the device itself "
                "(devcaps probe without --profile)")
    return f"the probe registered under {capability} ({probe.outcome.reason})"


def explain_lines(registry: CapabilityRegistry, capability: str, identity: DeviceIdentity,
                  probe: ProbeNote | None) -> list[str]:
    """Everything :mod:`pytest_devcaps.commands.explain` prints for one capability on one device."""
    record = registry.record(capability, identity.key)
    name = record.capability
    title = name if name == capability else f"{capability} (an alias of {name})"
    lines = [f"{title} on {identity.key}: {identity.name}, vendor {identity.vendor}, "
             f"arch {identity.arch}"]
    lines += rule_lines(registry.catalogue, identity, name)
    lines += _probe_lines(name, probe)
    lines += _layer_lines(record)
    lines.append(f"  final: {record.level.value} (source {record.source})")
    if record.level is Level.UNKNOWN:
        lines += decision_lines(registry.catalogue, identity, record, probe)
    return lines


def probe_notes(registry: CapabilityRegistry, capability: str,
                outcomes: Mapping[str, Mapping[str, ProbeOutcome]],
                probed: Sequence[str]) -> dict[str, ProbeNote | None]:
    """Per device key: the probe outcome of ``capability`` (None: no probe is registered)."""
    name = registry.check_name(capability)
    profile = registry.meta.get("profile")
    notes: dict[str, ProbeNote | None] = {}
    for identity in registry.devices:
        if name not in probed:
            notes[identity.key] = None
        elif profile:
            notes[identity.key] = ProbeNote(None, f"not run: profile {profile} describes hardware, "
                                                  "nothing is probed")
        else:
            outcome = outcomes.get(identity.key, {}).get(name)
            notes[identity.key] = ProbeNote(outcome, "" if outcome else "no outcome recorded")
    return notes


def resolve_short_name(catalogue: Any, name: str) -> str:
    """``name``, or the one capability (or alias) whose last dotted part it is (``bf16`` ->
    ``dtype.bf16``), said on stderr; several such names are a usage error listing them, and a
    name matching none raises the catalogue's error with the closest."""
    import sys

    from pytest_devcaps.errors import DevcapsError, UnknownCapabilityError, short_name_matches, suggestion

    try:
        catalogue.check_name(name)
        return name
    except UnknownCapabilityError:
        short = short_name_matches(name, [*catalogue.capabilities, *catalogue.aliases()])
        if len(short) == 1:
            print(f"devcaps: {name!r} taken as {short[0]!r}{suggestion(short[0])}", file=sys.stderr)
            return short[0]
        if len(short) > 1:
            raise DevcapsError(f"unknown capability {name!r}: it is the last part of "
                               f"{', '.join(repr(s) for s in short)}; name one") from None
        raise


def show_explanation(options: RegistryOptions, capability: str, devices: Sequence[str] = ()) -> None:
    """Build the registry as ``devcaps probe`` does and print the explanation for every selected
    device. Raises ``DevcapsError`` on bad input (an unknown capability names the closest)."""
    from pytest_devcaps.registry import build_registry
    from pytest_devcaps.hookspecs import vendor_hooks
    from pytest_devcaps.report.table import select_identities

    hook = vendor_hooks()
    registry = build_registry(options, hook=hook)
    capability = resolve_short_name(registry.catalogue, capability)
    notes = probe_notes(registry, capability, registry.probe_outcomes, registry.probed)
    blocks = [explain_lines(registry, capability, identity, notes[identity.key])
              for identity in select_identities(registry, devices)]
    print("\n\n".join("\n".join(block) for block in blocks))
