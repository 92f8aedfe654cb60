"""Precedence as layers: each layer proposes answers for a device given the answers below it.

The merge walks the layers in order, lowest precedence first, and every record it keeps
remembers the answers it replaced (:attr:`CapabilityRecord.history`)::

    vendor rules < probes < profile < override files < command line < hooks < implications

A probe and the vendor rule below it combine (:func:`merge_answer`): the probe says whether
the op runs, the rule whether that is native or emulated. Implications come last so that no
answer, however it was set, claims a capability whose prerequisite is unavailable.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Protocol, Sequence

from pytest_devcaps.errors import ConfigError, did_you_mean
from pytest_devcaps.model import (
    UNANSWERED_SOURCE,
    CapabilityRecord,
    DeviceIdentity,
    Level,
    ProbeOutcome,
)

if TYPE_CHECKING:
    from pytest_devcaps.config.catalogue import Catalogue, RuleVerdict
    from pytest_devcaps.config.overrides import OverrideEntry
    from pytest_devcaps.config.profiles import DeviceProfile
    from pytest_devcaps.registry.inputs import CapabilitySetting

RULE_SOURCE = "vendor-rule"
UNANSWERED_REASON = "no probe and no vendor rule answers this"


class Layer(Protocol):
    """One level of precedence."""

    def propose(self, device: DeviceIdentity,
                below: Mapping[str, CapabilityRecord]) -> Iterable[CapabilityRecord]:
        """The records this layer sets for ``device``; ``below`` holds the answers so far."""
        ...


def merge(layers: Sequence[Layer], device: DeviceIdentity,
          names: Iterable[str]) -> dict[str, CapabilityRecord]:
    """Every capability's answer for ``device``: the highest layer that proposed one wins."""
    answers = {name: CapabilityRecord(name, device.key, Level.UNKNOWN, UNANSWERED_REASON,
                                      UNANSWERED_SOURCE) for name in names}
    view = MappingProxyType(answers)
    for layer in layers:
        for record in list(layer.propose(device, view)):
            answers[record.capability] = record.replacing(answers[record.capability])
    return answers


def merge_answer(capability: str, device: str, outcome: ProbeOutcome | None,
                 verdict: RuleVerdict | None) -> CapabilityRecord:
    """Combine a probe outcome with the vendor rule's verdict into one record.

    A probe that ran the op is evidence the op works; the rule then says whether that is native
    or emulated. A probe that saw the op refused wins over any rule. A probe that could not tell
    defers to the rule.
    """
    if outcome is not None and outcome.level is Level.UNSUPPORTED:
        return CapabilityRecord(capability, device, Level.UNSUPPORTED, outcome.reason, "probe")
    if verdict is not None and verdict.level is Level.UNKNOWN and outcome is not None:
        verdict = None  # a rule that says "cannot tell" leaves the probe's evidence alone
    if outcome is not None and outcome.level.available:
        if verdict is None or verdict.level is Level.NATIVE:
            return CapabilityRecord(capability, device, outcome.level, outcome.reason, "probe")
        if verdict.level is Level.EMULATED:
            return CapabilityRecord(capability, device, Level.EMULATED,
                                    f"{outcome.reason}; {verdict.reason}", "probe")
        # The rule says unsupported, yet the op ran: trust the evidence, but not as native.
        return CapabilityRecord(capability, device, Level.EMULATED,
                                f"{outcome.reason}, but not natively ({verdict.reason})", "probe")
    if verdict is not None:
        reason = verdict.reason
        if outcome is not None:
            reason = f"{reason} (probe could not tell: {outcome.reason})"
        return CapabilityRecord(capability, device, verdict.level, reason, RULE_SOURCE)
    if outcome is not None:
        return CapabilityRecord(capability, device, Level.UNKNOWN, outcome.reason, "probe")
    return CapabilityRecord(capability, device, Level.UNKNOWN, UNANSWERED_REASON,
                            UNANSWERED_SOURCE)


class RuleLayer:
    """The catalogue's vendor rules: the first rule whose condition holds for the device."""

    def __init__(self, catalogue: Catalogue) -> None:
        self.catalogue = catalogue

    def propose(self, device: DeviceIdentity,
                below: Mapping[str, CapabilityRecord]) -> Iterable[CapabilityRecord]:
        from pytest_devcaps.config.catalogue import classify

        for name, verdict in classify(self.catalogue, device).items():
            yield CapabilityRecord(name, device.key, verdict.level, verdict.reason, RULE_SOURCE)


class ProbeLayer:
    """Probe outcomes per device key, each combined with the vendor rule answer below it."""

    def __init__(self, outcomes: Mapping[str, Mapping[str, ProbeOutcome]]) -> None:
        self.outcomes = outcomes

    def propose(self, device: DeviceIdentity,
                below: Mapping[str, CapabilityRecord]) -> Iterable[CapabilityRecord]:
        from pytest_devcaps.config.catalogue import RuleVerdict

        for name, outcome in self.outcomes.get(device.key, {}).items():
            rule = below.get(name)
            verdict = (RuleVerdict(rule.level, rule.reason)
                       if rule is not None and rule.source == RULE_SOURCE else None)
            yield merge_answer(name, device.key, outcome, verdict)


def _fixed(name: str, device: DeviceIdentity, verdict: RuleVerdict, source: str) -> CapabilityRecord:
    return CapabilityRecord(name, device.key, verdict.level, verdict.reason, source)


class ProfileLayer:
    """A device profile's ``fixed:`` answers (profiles describe hardware; nothing is probed)."""

    def __init__(self, profile: DeviceProfile) -> None:
        self.profile = profile

    def propose(self, device: DeviceIdentity,
                below: Mapping[str, CapabilityRecord]) -> Iterable[CapabilityRecord]:
        for name, verdict in self.profile.fixed.items():
            yield _fixed(name, device, verdict, f"profile:{self.profile.name}")


class OverrideLayer:
    """Entries of the user's override files, in file order then entry order (later ones win)."""

    def __init__(self, entries: Sequence[OverrideEntry]) -> None:
        self.entries = entries

    def propose(self, device: DeviceIdentity,
                below: Mapping[str, CapabilityRecord]) -> Iterable[CapabilityRecord]:
        for entry in self.entries:
            if entry.matches(device):
                for name, verdict in entry.settings.items():
                    yield _fixed(name, device, verdict, f"override:{entry.file}")


class CliLayer:
    """``--devcaps-set CAP=LEVEL[@DEVICE]`` (``devcaps --set``)."""

    def __init__(self, settings: Sequence[CapabilitySetting]) -> None:
        self.settings = settings

    def propose(self, device: DeviceIdentity,
                below: Mapping[str, CapabilityRecord]) -> Iterable[CapabilityRecord]:
        for setting in self.settings:
            if setting.applies_to(device):
                yield CapabilityRecord(setting.capability, device.key, setting.level,
                                       "set on the command line", "cli")


class HookLayer:
    """``pytest_devcaps_adjust_results``: plugins replace final answers (source ``hook:<name>``)."""

    def __init__(self, hook: Any) -> None:
        self.hook = hook

    def propose(self, device: DeviceIdentity,
                below: Mapping[str, CapabilityRecord]) -> Iterable[CapabilityRecord]:
        replaced: list[CapabilityRecord] = []
        for answer in self.hook.pytest_devcaps_adjust_results(device=device,
                                                              records=list(below.values())):
            for record in answer or ():
                replaced.append(_checked_hook_record(record, device, below))
        return replaced


def _checked_hook_record(record: Any, device: DeviceIdentity,
                         known: Mapping[str, CapabilityRecord]) -> CapabilityRecord:
    where = "pytest_devcaps_adjust_results"
    if not isinstance(record, CapabilityRecord):
        raise ConfigError(f"returned {type(record).__name__}, expected CapabilityRecord", file=where)
    if record.capability not in known:
        raise ConfigError(f"returned a record for unknown capability {record.capability!r}"
                          f"{did_you_mean(record.capability, known)}", file=where)
    if record.device != device.key:
        raise ConfigError(f"returned a record for device {record.device!r} while adjusting "
                          f"{device.key!r}", file=where)
    return record


class ImpliesLayer:
    """Enforce ``implies``: an available answer whose prerequisite is unsupported (or unknown)
    becomes unsupported (or unknown), naming the implication. Transitive, in dependency order."""

    SOURCE = "implies"

    def __init__(self, catalogue: Catalogue) -> None:
        self.catalogue = catalogue

    def propose(self, device: DeviceIdentity,
                below: Mapping[str, CapabilityRecord]) -> Iterable[CapabilityRecord]:
        final = dict(below)
        changed: list[CapabilityRecord] = []
        for name in self.catalogue.implication_order():
            record = final[name]
            if not record.available:
                continue
            blocker = next((final[t] for t in self.catalogue.capabilities[name].implies
                            if not final[t].available), None)
            if blocker is None:
                continue
            level = Level.UNSUPPORTED if blocker.level is Level.UNSUPPORTED else Level.UNKNOWN
            reason = f"needs {blocker.capability}, which is {blocker.describe()}"
            final[name] = CapabilityRecord(name, device.key, level, reason, self.SOURCE)
            changed.append(final[name])
        return changed
