"""Querying a registry: answers per (capability, device), views for one device, snapshots."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

from pytest_devcaps.errors import DevcapsValueError, UnknownDeviceError
from pytest_devcaps.model import CapabilityRecord, DeviceIdentity, Level, ProbeOutcome

if TYPE_CHECKING:
    import torch

    from pytest_devcaps.config.catalogue import Catalogue
    from pytest_devcaps.config.facts import FactVocabulary

SNAPSHOT_FORMAT = 2


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

    @property
    def dispatch_key(self) -> str:
        """The device's backend dispatch key (``"CUDA"``, ``"XPU"``, ``"PrivateUse1"``, ``"CPU"``),
        asked of torch, for ``torch.library`` registrations."""
        from pytest_devcaps.backends.dispatch import dispatch_key

        return dispatch_key(self.identity.type)

    @property
    def autograd_dispatch_key(self) -> str:
        """The device's autograd dispatch key (``"AutogradCUDA"``...), asked of torch."""
        from pytest_devcaps.backends.dispatch import autograd_dispatch_key

        return autograd_dispatch_key(self.identity.type)

    @property
    def dispatch_keys(self) -> tuple[str, str]:
        """``(dispatch_key, autograd_dispatch_key)``."""
        return self.dispatch_key, self.autograd_dispatch_key

    def __repr__(self) -> str:
        return f"<DeviceCapabilities {self.identity.key} ({self.identity.name})>"


class CapabilityRegistry:
    """Answers for every capability on every device of one machine (or one profile).

    Built by :func:`pytest_devcaps.registry.build_registry`; keeps the catalogue it was built
    from (``catalogue``), so names, descriptions, dtypes and implications are at hand, and the
    fact vocabulary of its backends (``facts``), which markers' ``when=`` conditions are
    checked and compiled against (version facts compare as versions).
    """

    def __init__(self, devices: Sequence[DeviceIdentity],
                 records: Mapping[str, Mapping[str, CapabilityRecord]],
                 catalogue: Catalogue, meta: Mapping[str, Any] | None = None,
                 facts: FactVocabulary | None = None, *,
                 probe_outcomes: Mapping[str, Mapping[str, ProbeOutcome]] | None = None,
                 probed: Sequence[str] = ()) -> None:
        from pytest_devcaps.config.facts import builtin_vocabulary

        self.devices: tuple[DeviceIdentity, ...] = tuple(devices)
        self._records = {dev: dict(caps) for dev, caps in records.items()}
        # lookups by key and by type, made once: a profile of 100,000 devices asked for every
        # device's records must not scan the devices for each record (that was quadratic)
        self._by_key: dict[str, DeviceIdentity] = {}
        self._by_type: dict[str, list[DeviceIdentity]] = {}
        for identity in self.devices:
            self._by_key.setdefault(identity.key, identity)
            self._by_type.setdefault(identity.type, []).append(identity)
        self.catalogue = catalogue
        self.meta: dict[str, Any] = dict(meta or {})
        self.facts: FactVocabulary = facts if facts is not None else builtin_vocabulary()
        #: What each probe measured, per device key (empty under a profile or when read from
        #: a snapshot), and every capability a probe is registered for: what the build saw,
        #: kept so that ``--explain`` need not run the probes again.
        self.probe_outcomes: Mapping[str, Mapping[str, ProbeOutcome]] = dict(probe_outcomes or {})
        self.probed: tuple[str, ...] = tuple(probed)

    # -- lookups -------------------------------------------------------------------------
    @property
    def capability_names(self) -> list[str]:
        return self.catalogue.names()

    @property
    def descriptions(self) -> dict[str, str]:
        return {name: spec.description for name, spec in self.catalogue.capabilities.items()}

    def check_name(self, capability: str) -> str:
        """The capability ``capability`` names: itself, or the one it is an alias of (PyTorch's
        ``attention.flash_attention`` -> ``attention.flash``); raises
        :class:`UnknownCapabilityError` with the closest name."""
        return self.catalogue.check_name(capability).name

    def capability_for_dtype(self, dtype_name: str) -> str | None:
        """The capability gating the torch dtype ``dtype_name`` (``bfloat16``), if any."""
        return self.catalogue.capability_for_dtype(dtype_name)

    def device_types(self) -> list[str]:
        return list(dict.fromkeys(identity.type for identity in self.devices))

    def identity(self, device: str | torch.device | None = None) -> DeviceIdentity:
        """The identity of ``device`` (``cuda`` means the first cuda device; None the primary).

        Raises :class:`UnknownDeviceError` for a device this registry has no answers for.
        """
        if device is None:
            return self.primary_device
        text = str(device)
        found = self._by_key.get(text)
        if found is not None:
            return found
        kind, _, index = text.partition(":")
        candidates = self._by_type.get(kind, [])
        if candidates and not index:
            return candidates[0]
        if candidates and index.isdigit() and int(index) < max(i.count for i in candidates):
            # Devices past the probed ones share the first one's answers (same model).
            return dataclasses.replace(candidates[0], index=int(index))
        raise UnknownDeviceError(text, [i.key for i in self.devices])

    @property
    def primary_device(self) -> DeviceIdentity:
        """The first accelerator, else the cpu."""
        for identity in self.devices:
            if identity.type != "cpu":
                return identity
        return self.devices[0]

    def record(self, capability: str, device: str | torch.device | None = None) -> CapabilityRecord:
        """The answer for ``capability`` (or the capability an alias names: the record says which
        one answered) on ``device``."""
        capability = self.check_name(capability)
        identity = self.identity(device)
        base = self._records.get(identity.key)
        if base is None:
            first = self._by_type[identity.type][0]
            return dataclasses.replace(self._records[first.key][capability], device=identity.key)
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
            "catalogue_digest": self.catalogue.digest,
            "devices": [identity.to_dict() for identity in self.devices],
            "capabilities": self.descriptions,
            "records": [record.to_dict() for caps in self._records.values() for record in caps.values()],
            "meta": dict(self.meta),
        }

    @classmethod
    def from_snapshot(cls, data: Mapping[str, Any], catalogue: Catalogue,
                      facts: FactVocabulary | None = None) -> CapabilityRegistry:
        """Rebuild a registry from :meth:`to_snapshot` data and the same catalogue.

        Raises DevcapsValueError (a ValueError) when the snapshot is of another format or another catalogue (an
        xdist worker whose hooks added different capabilities than the controller's).
        """
        if data.get("format") != SNAPSHOT_FORMAT:
            raise DevcapsValueError(f"unsupported registry snapshot format {data.get('format')!r}")
        if data.get("catalogue_digest") != catalogue.digest:
            raise DevcapsValueError("the registry snapshot was built from another catalogue than "
                                    "this process's (do the hooks add the same capabilities everywhere?)")
        records: dict[str, dict[str, CapabilityRecord]] = {}
        for entry in data["records"]:
            record = CapabilityRecord.from_dict(entry)
            records.setdefault(record.device, {})[record.capability] = record
        devices = [DeviceIdentity.from_dict(d) for d in data["devices"]]
        return cls(devices, records, catalogue, data.get("meta"), facts)
