"""Plain data records shared by every layer: levels, device identities, capability answers."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any, Mapping

from pytest_devcaps.errors import DevcapsValueError


class Level(str, enum.Enum):
    """How well a device supports a capability."""

    NATIVE = "native"
    EMULATED = "emulated"
    UNSUPPORTED = "unsupported"
    UNKNOWN = "unknown"

    @property
    def available(self) -> bool:
        """True when the capability works at all (natively or by emulation)."""
        return self in (Level.NATIVE, Level.EMULATED)

    @classmethod
    def parse(cls, text: str) -> Level:
        """Parse a level name; raises DevcapsValueError (a ValueError) listing the valid names."""
        try:
            return cls(str(text).strip().lower())
        except ValueError:
            valid = ", ".join(level.value for level in cls)
            given = str(text)
            shown = repr(given) if len(given) <= 60 else f"{given[:60]!r}..."
            raise DevcapsValueError(f"invalid level {shown}; expected one of: {valid}") from None

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Fact:
    """A device fact that rules, overrides and profiles may name.

    ``version``: its values are version strings (``"12.8"``), compared component-wise, so
    ``12.10`` is later than ``12.8`` (see :mod:`pytest_devcaps.config.expressions`).
    """

    description: str
    version: bool = False


#: The facts every device has: :meth:`DeviceIdentity.rule_facts` sets exactly these names
#: (plus what its backend adapter declares in ``facts``).
IDENTITY_FACTS: Mapping[str, Fact] = MappingProxyType({
    "type": Fact("torch device type: cpu, cuda, xpu, mps, hpu or a PrivateUse1 name"),
    "index": Fact("device index (None for the cpu)"),
    "vendor": Fact("lower-case vendor: nvidia, amd, intel, apple, habana, cpu..."),
    "name": Fact("the device's marketing name"),
    "arch": Fact("architecture: sm_90, gfx942, pvc, apple-m3, gaudi3, avx512..."),
    "memory_bytes": Fact("device memory in bytes (None when unknown)"),
    "memory_gib": Fact("device memory in GiB (None when unknown)"),
    "count": Fact("how many devices of this model the machine has"),
    "torch_version": Fact("torch.__version__", version=True),
    "runtime_version": Fact("the device runtime's version (CUDA, HIP, SYCL...)", version=True),
    "driver_version": Fact("the device driver's version", version=True),
})


_VERSION_FIELDS = tuple(name for name, fact in IDENTITY_FACTS.items() if fact.version)


@dataclass(frozen=True)
class DeviceIdentity:
    """What a device is.

    ``facts`` holds everything vendor rules may test (``compute_capability``, ``gcn_arch``,
    ``isa``, ``runtime``...); the named fields are the common, always-present ones.
    """

    type: str
    index: int | None
    vendor: str
    name: str
    arch: str
    memory_bytes: int | None = None
    count: int = 1
    torch_version: str = ""
    runtime_version: str | None = None
    driver_version: str | None = None
    facts: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """The device string torch understands: ``cpu``, ``cuda:0``..."""
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def rule_facts(self) -> dict[str, Any]:
        """The namespace vendor-rule expressions are evaluated against: every named field (the
        names of :data:`IDENTITY_FACTS`), ``memory_gib`` made from ``memory_bytes``, then
        ``facts``. A version field left empty (a profile names no ``torch_version``) is None, a
        fact the device does not have: ``torch_version < '2.14'`` must not hold for it."""
        facts: dict[str, Any] = {name: getattr(self, name) for name in IDENTITY_FIELDS}
        for name in _VERSION_FIELDS:
            if facts.get(name) == "":
                facts[name] = None
        facts["memory_gib"] = None if self.memory_bytes is None else self.memory_bytes / 2**30
        facts.update(self.facts)
        return facts

    def to_dict(self) -> dict[str, Any]:
        return {**{name: getattr(self, name) for name in IDENTITY_FIELDS}, "facts": dict(self.facts)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DeviceIdentity:
        """A dict of :meth:`to_dict`'s shape; a missing vendor or name is the device type, a
        missing index None, a missing arch empty, the rest their field defaults."""
        given = {name: data[name] for name in IDENTITY_FIELDS if name in data}
        fallback = {"index": None, "vendor": data["type"], "name": data["type"], "arch": ""}
        return cls(**{**fallback, **given, "facts": dict(data.get("facts") or {})})


IDENTITY_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(DeviceIdentity) if f.name != "facts")
"""DeviceIdentity's named fields, in order: the one list ``rule_facts``, ``to_dict`` and
``from_dict`` read (and, with ``memory_gib``, the names of :data:`IDENTITY_FACTS`)."""


# Answer sources (CapabilityRecord.source), written once: layers set them, explain and reports
# read them. Sources with a name carry it after the colon (``override:<file>``).
#: The source of an answer no layer gave: nothing probed or ruled on the capability.
UNANSWERED_SOURCE = "default"
RULE_SOURCE = "vendor-rule"
PROBE_SOURCE = "probe"
CLI_SOURCE = "cli"
IMPLIES_SOURCE = "implies"
PROFILE_PREFIX = "profile:"
OVERRIDE_PREFIX = "override:"
HOOK_PREFIX = "hook:"
EXPLICIT_PREFIXES = (PROFILE_PREFIX, OVERRIDE_PREFIX, HOOK_PREFIX)


def profile_source(name: str) -> str:
    return f"{PROFILE_PREFIX}{name}"


def override_source(file: str) -> str:
    return f"{OVERRIDE_PREFIX}{file}"


def hook_source(plugin: str) -> str:
    return f"{HOOK_PREFIX}{plugin}"


def is_explicit_source(source: str) -> bool:
    """Whether a person or a plugin set this answer on purpose (a profile, an override file,
    ``--devcaps-set`` or a hook), as opposed to a rule, a probe or nothing."""
    return source == CLI_SOURCE or source.startswith(EXPLICIT_PREFIXES)


@dataclass(frozen=True)
class CapabilityRecord:
    """One answer: does ``device`` have ``capability``, how well, why, and who said so.

    ``source`` is one of ``vendor-rule``, ``probe``, ``profile:<name>``, ``override:<file>``,
    ``cli``, ``hook:<plugin>``, ``implies`` or ``default`` (nothing answered): the constants
    above. ``history`` holds the answers of lower-precedence layers that this one replaced,
    oldest first, each in :meth:`describe` form, so a report can say what an override or the
    command line overrode. ``needs`` (source ``implies`` only): the implied capability whose
    answer decided this one, as data (the reason says it in words).
    """

    capability: str
    device: str
    level: Level
    reason: str
    source: str
    history: tuple[str, ...] = ()
    needs: str | None = None

    @property
    def available(self) -> bool:
        return self.level.available

    def describe(self) -> str:
        """``unsupported (probe: _scaled_mm raised ...)``: the form skip reasons use."""
        return f"{self.level.value} ({self.source}: {self.reason})"

    def replacing(self, previous: CapabilityRecord) -> CapabilityRecord:
        """This answer, taking the place of ``previous``, whose provenance it keeps."""
        if previous.source == UNANSWERED_SOURCE:
            return replace(self, history=previous.history)
        return replace(self, history=(*previous.history, previous.describe()))

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "capability": self.capability,
            "device": self.device,
            "level": self.level.value,
            "reason": self.reason,
            "source": self.source,
        }
        if self.history:
            data["history"] = list(self.history)
        if self.needs is not None:
            data["needs"] = self.needs
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CapabilityRecord:
        return cls(
            capability=data["capability"],
            device=data["device"],
            level=Level(data["level"]),
            reason=data.get("reason", ""),
            source=data.get("source", UNANSWERED_SOURCE),
            history=tuple(data.get("history", ())),
            needs=data.get("needs"),
        )


@dataclass(frozen=True)
class ProbeOutcome:
    """What one probe observed.

    ``NATIVE`` means "the op ran"; vendor rules decide whether that is native or emulated.
    ``UNSUPPORTED`` means the op refused to run; ``UNKNOWN`` means the probe could not tell
    (it crashed, hung, or does not apply to this device).

    ``transient``: the outcome says more about this run than about the device (the probe timed
    out, the runner failed, the child was killed from outside); it is not cached, so the next
    run asks again.
    """

    level: Level
    reason: str
    transient: bool = False


KNOWN_DEVICE_TYPES: tuple[str, ...] = ("cpu", "cuda", "xpu", "mps", "hpu", "mtia", "npu", "privateuseone")
"""Device types torch names (``torch.device`` accepts them); a backend may add its own."""
