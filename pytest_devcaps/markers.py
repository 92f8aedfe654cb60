"""Marker registration and evaluation: pure functions returning frozen records with a reason."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Literal, Sequence

import pytest

from pytest_devcaps.errors import MarkerError

if TYPE_CHECKING:  # the model is imported where a test first needs it
    from pytest_devcaps.model import DeviceIdentity
    from pytest_devcaps.registry import CapabilityRegistry

MARKER_LINES = (
    "requires_capability(*capabilities, any_of=None, native=False): skip unless the test's device "
    "has every capability (and at least one of any_of); native=True refuses emulated support.",
    "requires_devices(n): skip unless at least n devices of the test's device type are present.",
    "requires_memory(size, per_allocation=None): skip unless the device has at least size total "
    "memory ('24GiB'), and per_allocation for the largest single allocation where a backend caps it.",
    "dtypes(*dtypes): parametrize the dtype fixture; dtypes the device lacks are skipped with the "
    "capability as reason.",
)

def dtype_name(dtype: Any) -> str:
    """``torch.bfloat16`` -> ``bfloat16`` (works on anything whose str is ``torch.<name>``)."""
    return str(dtype).rsplit(".", 1)[-1]


MissingKind = Literal["capability", "any_of", "dtype", "devices", "memory"]


@dataclass(frozen=True)
class Missing:
    """One unmet requirement: the key reports group by, and the sentence a user reads.

    ``kind`` says what ``found`` is: a capability level (``capability``, ``any_of``, ``dtype``),
    a device count (``devices``) or a size (``memory``). ``source`` says who gave that answer.
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


def _capability_names(mark: pytest.Mark) -> list[str]:
    names: list[str] = []
    for arg in mark.args:
        if isinstance(arg, str):
            names.append(arg)
        elif isinstance(arg, (list, tuple)):
            names.extend(arg)
        else:
            raise MarkerError("requires_capability", f"takes capability names, got {arg!r}")
    return names


def validate_marks(marks: Iterable[pytest.Mark], registry: CapabilityRegistry) -> None:
    """Raise on unknown capability names or bad marker arguments (fails collection)."""
    for mark in marks:
        if mark.name == "requires_capability":
            unknown = set(mark.kwargs) - {"any_of", "native"}
            if unknown:
                raise MarkerError("requires_capability", f"unexpected keyword(s) {sorted(unknown)}; "
                                  "expected any_of=, native=")
            for name in _capability_names(mark) + list(mark.kwargs.get("any_of") or ()):
                registry.check_name(name)
            if not _capability_names(mark) and not mark.kwargs.get("any_of"):
                raise MarkerError("requires_capability", "needs at least one capability name")
        elif mark.name == "requires_devices":
            if len(mark.args) != 1 or not isinstance(mark.args[0], int) or mark.args[0] < 1:
                raise MarkerError("requires_devices", f"takes one positive int, got {mark.args!r}")
        elif mark.name == "requires_memory":
            parse_size(mark.args[0] if mark.args else None)
            if mark.kwargs.get("per_allocation") is not None:
                parse_size(mark.kwargs["per_allocation"])


_SIZE = r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*$"
"""Compiled on first use (``re`` caches it): the plugin imports this module in every session."""
_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_size(value: Any) -> int:
    """``"24GiB"`` -> bytes; ints are bytes already."""
    if isinstance(value, int) and value > 0:
        return value
    match = re.match(_SIZE, str(value), re.IGNORECASE) if isinstance(value, str) else None
    if not match:
        raise MarkerError("requires_memory",
                          f"takes a size like '24GiB' or a byte count, got {value!r}")
    return int(float(match.group(1)) * _UNITS[(match.group(2) or "B").lower()])


def _format_size(size: int) -> str:
    for unit, factor in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= factor:
            return f"{size / factor:.4g}{unit}"
    return f"{size}B"


def evaluate(marks: Sequence[pytest.Mark], registry: CapabilityRegistry, device: str,
             dtype: Any = None) -> Evaluation:
    """Evaluate the devcaps markers of one test against ``device`` (and its ``dtype`` parameter)."""
    from pytest_devcaps.model import Level

    identity = registry.identity(device)
    required: list[str] = []
    missing: list[Missing] = []

    def need(capability: str, *, native: bool, kind: MissingKind = "capability") -> None:
        record = registry.record(capability, identity.key)
        ok = record.level is Level.NATIVE if native else record.level.available
        if not ok:
            what = f"native {capability}" if native else capability
            missing.append(Missing(kind, capability, identity.key, record.level.value,
                                   record.source,
                                   f"requires {what} on {identity.key}: {record.describe()}"))

    if dtype is not None:
        capability = registry.capability_for_dtype(dtype_name(dtype))
        if capability:
            required.append(capability)
            need(capability, native=False, kind="dtype")

    for mark in marks:
        if mark.name == "requires_capability":
            native = bool(mark.kwargs.get("native", False))
            for name in _capability_names(mark):
                required.append(name)
                need(name, native=native)
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
        elif mark.name == "requires_devices":
            wanted = int(mark.args[0])
            required.append(f"devices>={wanted}")
            if identity.count < wanted:
                missing.append(Missing("devices", f"devices>={wanted}", identity.type,
                                       str(identity.count), "discovery",
                                       f"requires {wanted} {identity.type} devices; found {identity.count}"))
        elif mark.name == "requires_memory":
            missing.extend(_memory_check(mark, identity, required))
    return Evaluation(identity.key, tuple(dict.fromkeys(required)), tuple(missing))


def _memory_check(mark: pytest.Mark, identity: DeviceIdentity, required: list[str]) -> list[Missing]:
    found: list[Missing] = []
    total = parse_size(mark.args[0])
    key = f"memory>={_format_size(total)}"
    required.append(key)
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

