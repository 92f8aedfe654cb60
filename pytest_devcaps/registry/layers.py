"""Precedence as layers: each layer proposes answers for a device given the answers below it.

The merge walks the layers in order, lowest precedence first, and every record it keeps
remembers the answers it replaced (:attr:`CapabilityRecord.history`)::

    vendor rules < probes < profile < override files < command line < hooks < implications

A probe and the vendor rule below it combine (:func:`merge_answer`): the probe says whether
the op runs, the rule whether that is native or emulated. Implications come last so that no
answer, however it was set, claims a capability whose prerequisite is unavailable; they never
overrule silently: the new reason names the answer overruled, the record names the blocking
capability (``needs``), and an answer set on purpose (``--devcaps-set``, an override, a profile,
a hook) that an implication overrules is a :class:`DevcapsWarning`.

Sources are the constants of :mod:`pytest_devcaps.model` (``RULE_SOURCE``, ``hook_source()``...):
a hook's answers carry ``hook:<plugin>`` whatever source the plugin gave them.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Protocol, Sequence

from pytest_devcaps.errors import ConfigError, DevcapsWarning
from pytest_devcaps.model import (
    CLI_SOURCE,
    IMPLIES_SOURCE,
    PROBE_SOURCE,
    RULE_SOURCE as RULE_SOURCE,  # re-exported: its old import path
    UNANSWERED_SOURCE,
    CapabilityRecord,
    DeviceIdentity,
    Level,
    ProbeOutcome,
    hook_source,
    is_explicit_source,
    override_source,
    profile_source,
)

if TYPE_CHECKING:
    from pytest_devcaps.config.catalogue import Catalogue, RuleVerdict
    from pytest_devcaps.config.overrides import OverrideEntry
    from pytest_devcaps.config.profiles import DeviceProfile
    from pytest_devcaps.registry.inputs import CapabilitySetting

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
        return CapabilityRecord(capability, device, Level.UNSUPPORTED, outcome.reason, PROBE_SOURCE)
    if verdict is not None and verdict.level is Level.UNKNOWN and outcome is not None:
        verdict = None  # a rule that says "cannot tell" leaves the probe's evidence alone
    if outcome is not None and outcome.level.available:
        if verdict is None or verdict.level is Level.NATIVE:
            return CapabilityRecord(capability, device, outcome.level, outcome.reason, PROBE_SOURCE)
        if verdict.level is Level.EMULATED:
            return CapabilityRecord(capability, device, Level.EMULATED,
                                    f"{outcome.reason}; {verdict.reason}", PROBE_SOURCE)
        # The rule says unsupported, yet the op ran: trust the evidence, but not as native.
        return CapabilityRecord(capability, device, Level.EMULATED,
                                f"{outcome.reason}, but not natively ({verdict.reason})", PROBE_SOURCE)
    if verdict is not None:
        reason = verdict.reason
        if outcome is not None:
            reason = f"{reason} (probe could not tell: {outcome.reason})"
        return CapabilityRecord(capability, device, verdict.level, reason, RULE_SOURCE)
    if outcome is not None:
        return CapabilityRecord(capability, device, Level.UNKNOWN, outcome.reason, PROBE_SOURCE)
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
            yield _fixed(name, device, verdict, profile_source(self.profile.name))


class OverrideLayer:
    """Entries of the user's override files, in file order then entry order (later ones win)."""

    def __init__(self, entries: Sequence[OverrideEntry]) -> None:
        self.entries = entries

    def propose(self, device: DeviceIdentity,
                below: Mapping[str, CapabilityRecord]) -> Iterable[CapabilityRecord]:
        for entry in self.entries:
            if entry.matches(device):
                for name, verdict in entry.settings.items():
                    yield _fixed(name, device, verdict, override_source(entry.file))


class CliLayer:
    """``--devcaps-set CAP=LEVEL[@DEVICE]`` (``devcaps --set``)."""

    def __init__(self, settings: Sequence[CapabilitySetting]) -> None:
        self.settings = settings

    def propose(self, device: DeviceIdentity,
                below: Mapping[str, CapabilityRecord]) -> Iterable[CapabilityRecord]:
        for setting in self.settings:
            if setting.applies_to(device):
                yield CapabilityRecord(setting.capability, device.key, setting.level,
                                       "set on the command line", CLI_SOURCE)


class HookLayer:
    """``pytest_devcaps_adjust_results``: plugins replace final answers. Each answer's source is
    ``hook:<plugin>``, the plugin that returned it, whatever source the plugin wrote."""

    def __init__(self, hook: Any, catalogue: Catalogue | None = None) -> None:
        self.hook = hook
        self.specs: Mapping[str, Any] = {} if catalogue is None else catalogue.capabilities

    def propose(self, device: DeviceIdentity,
                below: Mapping[str, CapabilityRecord]) -> Iterable[CapabilityRecord]:
        replaced: list[CapabilityRecord] = []
        for plugin, answer in hook_answers(self.hook, device, list(below.values())):
            for record in answer or ():
                checked = _checked_hook_record(record, device, below, self.specs)
                replaced.append(replace(checked, source=hook_source(plugin)))
        return replaced


def hook_answers(hook: Any, device: DeviceIdentity,
                 records: list[CapabilityRecord]) -> list[tuple[str, Any]]:
    """Each plugin's answer with the plugin's name, in the order pluggy would call them.

    Through a pluggy relay (``config.hook``, :func:`pytest_devcaps.hookspecs.vendor_hooks`) every
    implementation is called on its own so its answer is known by its plugin; any other object
    standing in for a relay is one plugin, named by its type.
    """
    caller = hook.pytest_devcaps_adjust_results
    impls = getattr(caller, "get_hookimpls", None)
    kwargs: dict[str, Any] = {"device": device, "records": records}
    if impls is None:
        return [(type(hook).__name__, answer) for answer in caller(**kwargs)]
    answers = []
    for impl in reversed(impls()):  # pluggy calls the last registered first
        if getattr(impl, "hookwrapper", False) or getattr(impl, "wrapper", False):
            # each implementation is called on its own (to know whose answer is whose), so a
            # wrapper around them never sees their results: say so rather than drop its change
            warnings.warn(DevcapsWarning(
                f"plugin {_plugin_label(impl)} wraps pytest_devcaps_adjust_results "
                "(wrapper/hookwrapper): devcaps calls each implementation on its own and a wrapper "
                "is not run; return the records to change instead"), stacklevel=2)
            continue
        answer = impl.function(*(kwargs[name] for name in impl.argnames))
        if answer is not None:
            answers.append((_plugin_label(impl), answer))
    return answers


def _plugin_label(impl: Any) -> str:
    """A plugin's name for ``hook:<name>``: its registration name (an entry point's), else the
    module's (a conftest is registered under its path) or the class's (an unnamed object)."""
    name = str(getattr(impl, "plugin_name", "") or "")
    if name and os.sep not in name and not name.endswith(".py") and not name.isdigit():
        return name
    plugin = getattr(impl, "plugin", None)
    return str(getattr(plugin, "__name__", None) or type(plugin).__name__)


def _checked_hook_record(record: Any, device: DeviceIdentity, known: Mapping[str, CapabilityRecord],
                         specs: Mapping[str, Any] | None = None) -> CapabilityRecord:
    """A hook's record, checked: a CapabilityRecord of this device for a capability's own name
    (an alias is refused as everywhere an answer is set: ``specs``, the catalogue's)."""
    from pytest_devcaps.config.catalogue import alias_or_unknown

    where = "pytest_devcaps_adjust_results"
    if not isinstance(record, CapabilityRecord):
        raise ConfigError(f"returned {type(record).__name__}, expected CapabilityRecord", file=where)
    if record.capability not in known:
        raise ConfigError(f"returned a record for "
                          f"{alias_or_unknown(record.capability, specs or known)}",
                          file=where)
    if record.device != device.key:
        raise ConfigError(f"returned a record for device {record.device!r} while adjusting "
                          f"{device.key!r}", file=where)
    return record


class ImpliesLayer:
    """Enforce ``implies``: an available answer whose prerequisite is unsupported (or unknown)
    becomes unsupported (or unknown), naming the implication and the answer it overrules (a
    probe that ran the op included). Transitive, in dependency order. An answer set on purpose
    that it overrules is also a :class:`DevcapsWarning`: the setting is not silently lost."""

    SOURCE = IMPLIES_SOURCE

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
            final[name] = overruled(record, blocker)
            changed.append(final[name])
        return changed


def overruled(record: CapabilityRecord, blocker: CapabilityRecord) -> CapabilityRecord:
    """``record``'s answer after the implication on ``blocker`` (not available) overrules it."""
    level = Level.UNSUPPORTED if blocker.level is Level.UNSUPPORTED else Level.UNKNOWN
    reason = (f"needs {blocker.capability}, which is {blocker.describe()}; overrules "
              f"{record.level.value} from {record.source}")
    if is_explicit_source(record.source):
        warnings.warn(
            f"pytest-devcaps: {record.source} sets {record.capability}={record.level.value} on "
            f"{record.device}, but {record.capability} needs {blocker.capability}, which is "
            f"{blocker.level.value} ({blocker.source}): the answer is {level.value}; set "
            f"{blocker.capability} as well, or drop the setting", DevcapsWarning, stacklevel=2)
    return CapabilityRecord(record.capability, record.device, level, reason, IMPLIES_SOURCE,
                            needs=blocker.capability)
