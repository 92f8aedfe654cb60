"""The capability registry: one answer per (capability, device), with its level, reason and source.

Answers are merged with this precedence, highest first: command line (``cli``), override files
(``override:<file>``), the probe result classified by vendor rules (``probe``), the vendor rule
alone (``vendor-rule``). With a device profile nothing is probed: the profile's fixed answers
(``profile:<name>``) come before the vendor rules.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

from pytest_devcaps.errors import ConfigError, UnknownCapabilityError, did_you_mean
from pytest_devcaps.model import CapabilityRecord, DeviceIdentity, Level, ProbeOutcome

if TYPE_CHECKING:
    import torch

    from pytest_devcaps.backends.base import BackendAdapter
    from pytest_devcaps.config.catalogue import Catalogue, CapabilitySpec, RuleVerdict, VendorRule
    from pytest_devcaps.probes.base import ProbeSpec

SNAPSHOT_FORMAT = 1


@dataclass(frozen=True)
class CapabilitySetting:
    """A capability level forced from the command line: ``CAP=LEVEL`` or ``CAP=LEVEL@DEVICE``."""

    capability: str
    level: Level
    device: str | None = None

    @classmethod
    def parse(cls, text: str, *, source: str = "command line") -> CapabilitySetting:
        name, sep, rest = text.partition("=")
        if not sep or not name.strip() or not rest.strip():
            raise ConfigError(f"expected CAPABILITY=LEVEL[@DEVICE], got {text!r}", file=source)
        level_text, _, device = rest.partition("@")
        try:
            level = Level.parse(level_text)
        except ValueError as exc:
            raise ConfigError(str(exc), file=source, key=name.strip()) from None
        return cls(name.strip(), level, device.strip() or None)

    def applies_to(self, identity: DeviceIdentity) -> bool:
        return self.device is None or self.device in (identity.type, identity.key)


@dataclass(frozen=True)
class RegistryOptions:
    """Everything that shapes a registry; built from pytest options or CLI flags."""

    overrides: tuple[str, ...] = ()
    settings: tuple[CapabilitySetting, ...] = ()
    profile: str | None = None
    reprobe: bool = False
    cache_dir: Path | None = None
    probe_timeout: float = 10.0
    device_types: tuple[str, ...] | None = None


@dataclass
class BackendRegistrar:
    """Collects backend adapters from ``pytest_devcaps_register_backends``."""

    adapters: list[BackendAdapter] = field(default_factory=list)

    def add(self, adapter: BackendAdapter) -> None:
        self.adapters.append(adapter)


@dataclass
class CapabilityRegistrar:
    """Collects capabilities, probes and vendor rules from ``pytest_devcaps_register_capabilities``."""

    specs: list[CapabilitySpec] = field(default_factory=list)
    probes: dict[str, ProbeSpec] = field(default_factory=dict)
    rules: list[tuple[str, str, VendorRule]] = field(default_factory=list)

    def capability(self, name: str, description: str, probe: str | None = None,
                   implies: Sequence[str] = ()) -> None:
        from pytest_devcaps.config.catalogue import CapabilitySpec

        self.specs.append(CapabilitySpec(name, description, probe, tuple(implies)))

    def probe(self, name: str, function: Callable[[str], ProbeOutcome], isolated: bool = True) -> None:
        from pytest_devcaps.probes.base import ProbeSpec

        self.probes[name] = ProbeSpec(name, function, isolated)

    def rule(self, vendor: str, capability: str, level: Level | str, reason: str,
             when: str | None = None) -> None:
        from pytest_devcaps.config import VendorRule, compile_expression

        expression = None if when is None else compile_expression(when, file="<hook>", key=capability)
        level = level if isinstance(level, Level) else Level.parse(level)
        self.rules.append((vendor, capability, VendorRule(level, reason, expression, file="<hook>")))


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
        return CapabilityRecord(capability, device, verdict.level, reason, "vendor-rule")
    if outcome is not None:
        return CapabilityRecord(capability, device, Level.UNKNOWN, outcome.reason, "probe")
    return CapabilityRecord(capability, device, Level.UNKNOWN,
                            "no probe and no vendor rule answers this", "default")


class DeviceCapabilities:
    """The registry seen from one device: what the ``devcaps`` fixture gives a test."""

    def __init__(self, registry: CapabilityRegistry, identity: DeviceIdentity) -> None:
        self.registry = registry
        self.identity = identity

    @property
    def device(self) -> str:
        return self.identity.key

    def __getitem__(self, capability: str) -> CapabilityRecord:
        return self.registry.record(capability, self.identity.key)

    def has(self, capability: str, *, native: bool = False) -> bool:
        return self.registry.has(capability, self.identity.key, native=native)

    def level(self, capability: str) -> Level:
        return self[capability].level

    def records(self) -> list[CapabilityRecord]:
        return self.registry.records(self.identity.key)

    def __repr__(self) -> str:
        return f"<DeviceCapabilities {self.identity.key} ({self.identity.name})>"


class CapabilityRegistry:
    """Answers for every capability on every device of one machine (or one profile)."""

    def __init__(self, devices: Sequence[DeviceIdentity],
                 records: Mapping[str, Mapping[str, CapabilityRecord]],
                 descriptions: Mapping[str, str], meta: Mapping[str, Any] | None = None) -> None:
        self.devices: tuple[DeviceIdentity, ...] = tuple(devices)
        self._records = {dev: dict(caps) for dev, caps in records.items()}
        self.descriptions: dict[str, str] = dict(descriptions)
        self.meta: dict[str, Any] = dict(meta or {})

    # -- lookups -------------------------------------------------------------------------
    @property
    def capability_names(self) -> list[str]:
        return sorted(self.descriptions)

    def check_name(self, capability: str) -> str:
        """Return ``capability`` or raise :class:`UnknownCapabilityError` with the closest name."""
        if capability not in self.descriptions:
            raise UnknownCapabilityError(capability, self.descriptions)
        return capability

    def device_types(self) -> list[str]:
        seen: list[str] = []
        for identity in self.devices:
            if identity.type not in seen:
                seen.append(identity.type)
        return seen

    def identity(self, device: str | torch.device | None = None) -> DeviceIdentity:
        """The identity of ``device`` (``cuda`` means the first cuda device; None the primary)."""
        if device is None:
            return self.primary_device
        text = str(device)
        for identity in self.devices:
            if identity.key == text:
                return identity
        dtype, _, index = text.partition(":")
        candidates = [i for i in self.devices if i.type == dtype]
        if candidates and not index:
            return candidates[0]
        if candidates and index.isdigit():
            # Devices past the probed ones share the first one's answers (same model).
            return dataclasses.replace(candidates[0], index=int(index))
        known = [i.key for i in self.devices]
        raise KeyError(f"no device {text!r} in this registry; devices: {', '.join(known)}"
                       f"{did_you_mean(text, known)}")

    @property
    def primary_device(self) -> DeviceIdentity:
        """The first accelerator, else the cpu."""
        for identity in self.devices:
            if identity.type != "cpu":
                return identity
        return self.devices[0]

    def record(self, capability: str, device: str | torch.device | None = None) -> CapabilityRecord:
        self.check_name(capability)
        identity = self.identity(device)
        base = self._records.get(identity.key)
        if base is None:
            first = next(i for i in self.devices if i.type == identity.type)
            found = self._records[first.key][capability]
            return dataclasses.replace(found, device=identity.key)
        return base[capability]

    def has(self, capability: str, device: str | torch.device | None = None, *,
            native: bool = False) -> bool:
        level = self.record(capability, device).level
        return level is Level.NATIVE if native else level.available

    def records(self, device: str | torch.device | None = None) -> list[CapabilityRecord]:
        identity = self.identity(device)
        return [self.record(name, identity.key) for name in self.capability_names]

    def view(self, device: str | torch.device | None = None) -> DeviceCapabilities:
        return DeviceCapabilities(self, self.identity(device))

    def __iter__(self) -> Iterator[CapabilityRecord]:
        for identity in self.devices:
            yield from self.records(identity.key)

    # -- plain-data form (xdist workerinput, JSON reports) -------------------------------
    def to_snapshot(self) -> dict[str, Any]:
        return {
            "format": SNAPSHOT_FORMAT,
            "devices": [identity.to_dict() for identity in self.devices],
            "capabilities": dict(self.descriptions),
            "records": [record.to_dict() for caps in self._records.values() for record in caps.values()],
            "meta": dict(self.meta),
        }

    @classmethod
    def from_snapshot(cls, data: Mapping[str, Any]) -> CapabilityRegistry:
        if data.get("format") != SNAPSHOT_FORMAT:
            raise ValueError(f"unsupported registry snapshot format {data.get('format')!r}")
        records: dict[str, dict[str, CapabilityRecord]] = {}
        for entry in data["records"]:
            record = CapabilityRecord.from_dict(entry)
            records.setdefault(record.device, {})[record.capability] = record
        devices = [DeviceIdentity.from_dict(d) for d in data["devices"]]
        return cls(devices, records, data["capabilities"], data.get("meta"))

    # -- building ------------------------------------------------------------------------
    @classmethod
    def build(cls, options: RegistryOptions = RegistryOptions(), hook: Any = None) -> CapabilityRegistry:
        """Discover devices, probe them (or read the cache), apply rules, overrides and settings.

        ``hook`` is a pluggy hook relay (``config.hook``) carrying the ``pytest_devcaps_*`` hooks.
        """
        return _Builder(options, hook).build()


class _Builder:
    def __init__(self, options: RegistryOptions, hook: Any) -> None:
        self.options = options
        self.hook = hook

    def build(self) -> CapabilityRegistry:
        from pytest_devcaps.config import classify, load_catalogue, load_overrides

        started = time.perf_counter()
        extra = CapabilityRegistrar()
        if self.hook is not None:
            self.hook.pytest_devcaps_register_capabilities(registrar=extra)
        catalogue = load_catalogue()
        if extra.specs or extra.rules:
            catalogue = catalogue.with_capabilities(extra.specs, extra.rules)
        self._check_settings(catalogue)
        overrides = load_overrides(list(self.options.overrides), catalogue)

        meta: dict[str, Any] = {"overrides": list(self.options.overrides)}
        if self.options.profile:
            from pytest_devcaps.config import load_profile

            profile = load_profile(self.options.profile, catalogue)
            identities = list(profile.identities)
            fixed = dict(profile.fixed)
            outcomes: dict[str, dict[str, ProbeOutcome]] = {}
            meta.update(profile=profile.name, cache="none (profile)")
        else:
            identities = self._discover()
            fixed = {}
            outcomes = self._probe(identities, catalogue, extra, meta)

        records: dict[str, dict[str, CapabilityRecord]] = {}
        for identity in identities:
            verdicts = classify(catalogue, identity)
            device_outcomes = outcomes.get(identity.key, {})
            answers: dict[str, CapabilityRecord] = {}
            for name in catalogue.names():
                if name in fixed:
                    verdict = fixed[name]
                    answers[name] = CapabilityRecord(name, identity.key, verdict.level, verdict.reason,
                                                     f"profile:{meta['profile']}")
                else:
                    answers[name] = merge_answer(name, identity.key, device_outcomes.get(name),
                                                 verdicts.get(name))
            for entry in overrides:
                if entry.matches(identity):
                    for name, verdict in entry.settings.items():
                        answers[name] = CapabilityRecord(name, identity.key, verdict.level,
                                                         verdict.reason, f"override:{entry.file}")
            for setting in self.options.settings:
                if setting.applies_to(identity):
                    answers[setting.capability] = CapabilityRecord(
                        setting.capability, identity.key, setting.level,
                        "set on the command line", "cli")
            if self.hook is not None:
                for replaced in self.hook.pytest_devcaps_adjust_results(
                        device=identity, records=list(answers.values())):
                    for record in replaced or ():
                        answers[record.capability] = record
            records[identity.key] = answers
        meta["build_seconds"] = round(time.perf_counter() - started, 4)
        descriptions = {name: spec.description for name, spec in catalogue.capabilities.items()}
        return CapabilityRegistry(identities, records, descriptions, meta)

    def _check_settings(self, catalogue: Catalogue) -> None:
        for setting in self.options.settings:
            if setting.capability not in catalogue.capabilities:
                raise ConfigError(
                    f"unknown capability {setting.capability!r}"
                    f"{did_you_mean(setting.capability, catalogue.names())}",
                    file="command line", key=setting.capability)

    def _discover(self) -> list[DeviceIdentity]:
        from pytest_devcaps.backends import builtin_backends, discover_devices

        registrar = BackendRegistrar(list(builtin_backends()))
        if self.hook is not None:
            self.hook.pytest_devcaps_register_backends(registrar=registrar)
        identities = discover_devices(registrar.adapters)
        wanted = self.options.device_types
        if wanted is not None:
            identities = [i for i in identities if i.type in wanted]
        return identities

    def _probe(self, identities: Sequence[DeviceIdentity], catalogue: Catalogue,
               extra: CapabilityRegistrar, meta: dict[str, Any]) -> dict[str, dict[str, ProbeOutcome]]:
        from pytest_devcaps.cache import ProbeCache, fingerprint
        from pytest_devcaps.probes import builtin_probes, run_probes

        probes = {**builtin_probes(), **extra.probes}
        specs = {name: probes[spec.probe] for name, spec in catalogue.capabilities.items()
                 if spec.probe and spec.probe in probes}
        cache = ProbeCache(self.options.cache_dir)
        results: dict[str, dict[str, ProbeOutcome]] = {}
        status: list[str] = []
        probe_seconds = 0.0
        by_model: dict[tuple[Any, ...], dict[str, ProbeOutcome]] = {}
        for identity in identities:
            model = (identity.type, identity.vendor, identity.name, identity.arch)
            if model in by_model:  # identical devices share one probe run
                results[identity.key] = by_model[model]
                continue
            key = fingerprint({
                "identity": {**identity.to_dict(), "index": None},
                "catalogue": catalogue.digest,
                "probes": sorted(f"{n}={s.function.__module__}:{s.function.__qualname__}"
                                 for n, s in specs.items()),
            })
            outcomes = None if self.options.reprobe else cache.load(key)
            if outcomes is None:
                began = time.perf_counter()
                outcomes = run_probes(identity.key, specs, timeout=self.options.probe_timeout)
                probe_seconds += time.perf_counter() - began
                cache.store(key, outcomes)
                status.append("reprobe" if self.options.reprobe else "miss")
            else:
                status.append("hit")
            results[identity.key] = by_model[model] = outcomes
        meta["cache"] = ",".join(status) or "none"
        meta["probe_seconds"] = round(probe_seconds, 3)
        meta["cache_dir"] = str(cache.directory)
        return results


@functools.lru_cache(maxsize=1)
def _built_default() -> CapabilityRegistry:
    return CapabilityRegistry.build(RegistryOptions())


_installed: list[CapabilityRegistry] = []


def install_default_registry(registry: CapabilityRegistry) -> None:
    """Make ``registry`` what :func:`default_registry` returns until it is uninstalled.

    The plugin installs its session's registry, so library code (``devcaps_kernels``) sees the
    same answers, overrides included, as the tests do. Nested sessions (pytester) stack.
    """
    _installed.append(registry)


def uninstall_default_registry(registry: CapabilityRegistry) -> None:
    if registry in _installed:
        _installed.remove(registry)


def default_registry() -> CapabilityRegistry:
    """The process-wide registry library code consults (probes once; cached on disk)."""
    return _installed[-1] if _installed else _built_default()


def device_has(device: str | torch.device, capability: str, *, native: bool = False) -> bool:
    """Whether ``device`` has ``capability`` (``native=True`` refuses emulation)."""
    registry = default_registry()
    try:
        return registry.has(capability, device, native=native)
    except KeyError as exc:
        if isinstance(exc, UnknownCapabilityError):
            raise
        return False

