"""Marker registration and evaluation: pure functions returning frozen records with a reason."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Literal, Sequence

import pytest

from pytest_devcaps import classification, conditions, expectations, tolerances
from pytest_devcaps.errors import MarkerError, UnknownDeviceError, did_you_mean
from pytest_devcaps.markargs import MARKER_KEYWORDS, capability_names, check_keywords
from pytest_devcaps.model import DeviceIdentity, Level
from pytest_devcaps.tolerances import dtype_name

__all__ = ["Evaluation", "Missing", "capability_names", "dtype_name", "evaluate", "parse_size",
           "validate_marks"]

if TYPE_CHECKING:
    from pytest_devcaps.registry import CapabilityRegistry

MARKER_LINES = (
    "requires_capability(*capabilities, any_of=None, native=False): skip unless the test's device "
    "has every capability (and at least one of any_of); native=True refuses emulated support.",
    "requires_devices(n): skip unless at least n devices of the test's device type are present.",
    "requires_memory(size, per_allocation=None, free=False): skip unless the device has at least "
    "size memory ('24GiB' = 24*2**30 bytes, '24GB' = 24*10**9), free memory at test time with "
    "free=True where the backend reports it, and per_allocation for the largest single allocation.",
    "dtypes(*dtypes, when=None): parametrize the dtype fixture; when={'cuda': (...), 'amd': (...)} "
    "gives a device type's or vendor's own list; dtypes the device lacks skip with the capability.",
    "skip_on(when, reason): skip where a condition over device facts holds "
    "(\"vendor == 'nvidia' and compute_capability < 9.0\"); the skip names the condition and facts.",
    "xfail_on(when, reason, strict=False, raises=None): expect failure where a condition over "
    "device facts holds.",
    "tolerance(dtype=None, atol, rtol, when=None): the tolerance the tolerances fixture gives for "
    "dtype on devices where when holds.",
    "hardware(cls): the hardware class of a test: generic, accelerator, or a device type or vendor; "
    "select with --devcaps-hardware.",
)

#: Markers :func:`evaluate` turns into skips.
EVALUATED_MARKERS = ("requires_capability", "requires_devices", "requires_memory", "skip_on")
#: Markers :func:`validate_marks` checks (collection fails on a bad one).
VALIDATED_MARKERS = (*EVALUATED_MARKERS, "dtypes", "xfail_on", "tolerance", "hardware")

MissingKind = Literal["capability", "any_of", "dtype", "devices", "memory", "condition", "device"]


@dataclass(frozen=True)
class Missing:
    """One unmet requirement: the key reports group by, and the sentence a user reads.

    ``kind`` says what ``found`` is: a capability level (``capability``, ``any_of``, ``dtype``),
    a device count (``devices``), a size (``memory``), the facts a ``skip_on`` condition read
    (``condition``) or a device the registry lacks (``device``). ``source`` says who answered.
    """

    kind: MissingKind
    key: str
    device: str
    found: str
    source: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "requirement": self.key, "device": self.device,
                "found": self.found, "source": self.source, "reason": self.reason}


@dataclass(frozen=True)
class Evaluation:
    """What the markers of one test ask for on its device, and what is missing."""

    device: str
    required: tuple[str, ...]
    missing: tuple[Missing, ...]

    @property
    def skip(self) -> bool:
        return bool(self.missing)

    @property
    def reason(self) -> str:
        return "; ".join(m.reason for m in self.missing)


def validate_marks(marks: Iterable[pytest.Mark], registry: CapabilityRegistry) -> None:
    """Raise on unknown capability names or bad marker arguments (fails collection)."""
    for mark in marks:
        if mark.name in MARKER_KEYWORDS:
            check_keywords(mark.name, mark.kwargs)
        if mark.name == "requires_capability":
            for name in capability_names(mark) + list(mark.kwargs.get("any_of") or ()):
                registry.check_name(name)
            if not capability_names(mark) and not mark.kwargs.get("any_of"):
                raise MarkerError("requires_capability", "needs at least one capability name")
        elif mark.name == "requires_devices":
            if len(mark.args) != 1 or not isinstance(mark.args[0], int) or mark.args[0] < 1:
                raise MarkerError("requires_devices", f"takes one positive int, got {mark.args!r}")
        elif mark.name == "requires_memory":
            _validate_memory(mark)
        else:
            _validate_expectation(mark, registry)


def _validate_memory(mark: pytest.Mark) -> None:
    parse_size(mark.args[0] if mark.args else None)
    if mark.kwargs.get("per_allocation") is not None:
        parse_size(mark.kwargs["per_allocation"])
    if not isinstance(mark.kwargs.get("free", False), bool):
        raise MarkerError("requires_memory", f"free= takes True or False, got {mark.kwargs['free']!r}")


def _validate_expectation(mark: pytest.Mark, registry: CapabilityRegistry) -> None:
    """``skip_on``, ``xfail_on``, ``tolerance`` and ``dtypes(when=)``: parse to validate."""
    if mark.name in expectations.MARKERS:
        expectations.parse_condition(mark.name, mark.args, mark.kwargs,
                                     conditions.known_facts(registry))
    elif mark.name == classification.MARKER:
        classification.check_class(classification.declared([mark], None), lambda: registry)
    elif mark.name == tolerances.MARKER:
        tolerances.parse_tolerance(mark.args, mark.kwargs, conditions.known_facts(registry))
    elif mark.name == "dtypes":
        when = mark.kwargs.get("when")
        if when is None:
            return
        if not isinstance(when, dict) or not mark.args:
            raise MarkerError("dtypes", "when= takes {device type or vendor: (dtypes...)} and "
                                        "the default dtypes positionally, for the other devices")
        known = conditions.device_names(registry)
        for key, values in when.items():
            if key not in known:
                raise MarkerError("dtypes", f"when= key {key!r} is not a device type or vendor"
                                            f"{did_you_mean(str(key), known)}")
            if not isinstance(values, (list, tuple)) or not values:
                raise MarkerError("dtypes", f"when={{{key!r}: ...}} takes a non-empty tuple of dtypes")


def dtypes_for(mark: pytest.Mark, identity: DeviceIdentity | None) -> list[Any]:
    """The dtypes a ``dtypes`` mark gives ``identity``: its vendor's list, else its device
    type's, else the positional default (as ``dtypesIfCUDA`` overrides ``dtypes``)."""
    chosen = None
    if identity is not None:
        when = mark.kwargs.get("when") or {}
        vendor = str(identity.vendor).lower()
        for key in sorted(when, key=lambda k: k != vendor):  # the vendor's list first
            if conditions.names_device(key, identity):
                chosen = when[key]
                break
    values = list(mark.args) if chosen is None else list(chosen)
    if len(values) == 1 and isinstance(values[0], (list, tuple)):
        values = list(values[0])
    return values


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*$", re.IGNORECASE)
_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_size(value: Any) -> int:
    """``"24GiB"`` -> bytes; ints are bytes already."""
    if isinstance(value, int) and value > 0:
        return value
    match = _SIZE.match(str(value)) if isinstance(value, str) else None
    if not match:
        raise MarkerError("requires_memory",
                          f"takes a size like '24GiB' or a byte count, got {value!r}")
    return int(float(match.group(1)) * _UNITS[(match.group(2) or "B").lower()])


def _format_size(size: int) -> str:
    for unit, factor in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= factor:
            return f"{size / factor:.4g}{unit}"
    return f"{size}B"


FreeMemoryReader = Callable[[DeviceIdentity], "int | None"]


def evaluate(marks: Sequence[pytest.Mark], registry: CapabilityRegistry, device: str,
             dtype: Any = None, free_memory: FreeMemoryReader | None = None) -> Evaluation:
    """Evaluate the devcaps markers of one test against ``device`` (and its ``dtype`` parameter).

    ``free_memory`` reads a device's free bytes for ``requires_memory(free=True)``; without it
    (at collection) only the total is checked, and :func:`free_memory_missing` checks the free
    memory right before the test runs.
    """
    try:
        identity = registry.identity(device)
    except UnknownDeviceError as exc:
        return Evaluation(device, (), (Missing("device", device, device, "absent", "discovery",
                                               f"requires device {device}: {exc}"),))
    required: list[str] = []
    missing: list[Missing] = []
    if dtype is not None:
        capability = registry.capability_for_dtype(dtype_name(dtype))
        if capability:
            required.append(capability)
            missing.extend(_need(registry, identity, capability, native=False, kind="dtype"))
    for mark in marks:
        if mark.name == "requires_capability":
            missing.extend(_capability_check(mark, registry, identity, required))
        elif mark.name == "requires_devices":
            wanted = int(mark.args[0])
            required.append(f"devices>={wanted}")
            if identity.count < wanted:
                missing.append(Missing("devices", f"devices>={wanted}", identity.type,
                                       str(identity.count), "discovery",
                                       f"requires {wanted} {identity.type} devices; found {identity.count}"))
        elif mark.name == "requires_memory":
            missing.extend(_memory_check(mark, identity, required))
            if free_memory is not None:
                missing.extend(free_memory_missing([mark], identity, free_memory))
        elif mark.name == "skip_on":
            condition = expectations.parse_condition(mark.name, mark.args, mark.kwargs,
                                                     conditions.known_facts(registry))
            if condition.applies(identity):
                missing.append(Missing("condition", condition.key, identity.key,
                                       condition.found(identity), "marker",
                                       condition.describe(identity)))
    return Evaluation(identity.key, tuple(dict.fromkeys(required)), tuple(missing))


def _need(registry: CapabilityRegistry, identity: DeviceIdentity, capability: str, *,
          native: bool, kind: MissingKind = "capability") -> list[Missing]:
    record = registry.record(capability, identity.key)
    ok = record.level is Level.NATIVE if native else record.level.available
    if ok:
        return []
    what = f"native {capability}" if native else capability
    return [Missing(kind, capability, identity.key, record.level.value, record.source,
                    f"requires {what} on {identity.key}: {record.describe()}")]


def _capability_check(mark: pytest.Mark, registry: CapabilityRegistry, identity: DeviceIdentity,
                      required: list[str]) -> list[Missing]:
    native = bool(mark.kwargs.get("native", False))
    missing: list[Missing] = []
    for name in capability_names(mark):
        required.append(name)
        missing.extend(_need(registry, identity, name, native=native))
    alternatives = list(mark.kwargs.get("any_of") or ())
    if alternatives:
        required.extend(alternatives)
        records = [registry.record(name, identity.key) for name in alternatives]
        if not any((r.level is Level.NATIVE) if native else r.available for r in records):
            detail = "; ".join(f"{r.capability} {r.describe()}" for r in records)
            missing.append(Missing("any_of", "any_of(" + ",".join(alternatives) + ")",
                                   identity.key, "none available", "marker",
                                   f"requires any of {', '.join(alternatives)} on "
                                   f"{identity.key}: {detail}"))
    return missing


def _memory_check(mark: pytest.Mark, identity: DeviceIdentity, required: list[str]) -> list[Missing]:
    found: list[Missing] = []
    total = parse_size(mark.args[0])
    key = f"memory>={_format_size(total)}"
    required.append(key)
    if mark.kwargs.get("free"):
        required.append(f"free {key}")
    have = identity.memory_bytes
    if have is None or have < total:
        seen = "unknown" if have is None else _format_size(have)
        found.append(Missing("memory", key, identity.key, seen, "discovery",
                             f"requires {_format_size(total)} memory on {identity.key}; found {seen}"))
    per_allocation = mark.kwargs.get("per_allocation")
    if per_allocation is not None:
        wanted = parse_size(per_allocation)
        # Backends whose single allocations are capped below total memory report the cap as
        # max_allocation_bytes (None when the cap exists but cannot be read, as on MPS).
        if "max_allocation_bytes" in identity.facts:
            cap = identity.facts["max_allocation_bytes"]
        else:
            cap = identity.memory_bytes
        akey = f"allocation>={_format_size(wanted)}"
        required.append(akey)
        if cap is None or cap < wanted:
            seen = "unknown" if cap is None else _format_size(int(cap))
            found.append(Missing("memory", akey, identity.key, seen, "discovery",
                                 f"requires a single {_format_size(wanted)} allocation on "
                                 f"{identity.key}; the largest allowed is {seen}"))
    return found


def free_memory_missing(marks: Iterable[pytest.Mark], identity: DeviceIdentity,
                        reader: FreeMemoryReader) -> list[Missing]:
    """``requires_memory(size, free=True)`` checked against the free memory ``reader`` reports
    now. A backend that reports none leaves the total-memory check of :func:`evaluate` as the
    answer (the requirement ``free memory>=...`` stays in the report)."""
    found: list[Missing] = []
    for mark in marks:
        if mark.name != "requires_memory" or not mark.kwargs.get("free"):
            continue
        wanted = parse_size(mark.args[0])
        free = reader(identity)
        if free is not None and free < wanted:
            found.append(Missing("memory", f"free memory>={_format_size(wanted)}", identity.key,
                                 _format_size(free), "runtime",
                                 f"requires {_format_size(wanted)} free memory on {identity.key}; "
                                 f"found {_format_size(free)} free"))
    return found
