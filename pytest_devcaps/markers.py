"""Marker registration and evaluation: pure functions returning frozen records with a reason."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Callable, Collection, Iterable, Literal, Mapping, Sequence

import pytest

from pytest_devcaps.errors import MarkerError, UnknownCapabilityError, did_you_mean, short_repr
from pytest_devcaps.model import DeviceIdentity, Level

if TYPE_CHECKING:
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
    alternatives: tuple[str, ...] = ()

    @property
    def capabilities(self) -> tuple[str, ...]:
        """The capabilities this requirement names: its own, or an ``any_of``'s alternatives
        (what ``--devcaps-require`` matches against); none for device counts and sizes."""
        if self.kind in ("capability", "dtype"):
            return (self.key,)
        return self.alternatives

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"kind": self.kind, "requirement": self.key, "device": self.device,
                                "found": self.found, "source": self.source, "reason": self.reason}
        if self.alternatives:
            data["alternatives"] = list(self.alternatives)
        return data


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
    for index, arg in enumerate(mark.args, 1):
        items = list(arg) if isinstance(arg, (list, tuple)) else [arg]
        if not items or not all(isinstance(item, str) and item for item in items):
            raise _bad(mark.name, f"argument {index}", "must be a capability name or a list of them",
                       arg)
        names.extend(items)
    return names


def dtype_values(mark: pytest.Mark) -> list[Any]:
    """The dtypes of a ``dtypes`` mark: ``dtypes(a, b)`` or ``dtypes([a, b])``."""
    values = list(mark.args)
    if len(values) == 1 and isinstance(values[0], (list, tuple)):
        values = list(values[0])
    return values


# -- argument validation: one Signature per marker -----------------------------------------

@dataclass(frozen=True)
class MarkContext:
    """What validation consults: the registry (capability names) and the fixtures the test
    requests (None where unknown, as for unittest classes)."""

    registry: CapabilityRegistry
    fixturenames: Collection[str] | None = None


ArgsCheck = Callable[[pytest.Mark, MarkContext], None]
KeywordCheck = Callable[[str, str, Any, MarkContext], None]  # (marker, keyword, value, context)


@dataclass(frozen=True)
class Signature:
    """What one marker takes: a check of its positional arguments, one check per keyword
    argument (any other keyword is an error) and the fixture it parametrizes, if any."""

    args: ArgsCheck
    keywords: Mapping[str, KeywordCheck]
    fixture: str | None = None


def _bad(marker: str, argument: str, expected: str, value: Any, hint: str = "") -> MarkerError:
    return MarkerError(marker, f"{argument} {expected}, got {short_repr(value)}{hint}")


def _known(marker: str, argument: str, name: str, context: MarkContext) -> None:
    try:
        context.registry.check_name(name)
    except UnknownCapabilityError as exc:
        raise MarkerError(marker, f"{argument}: {exc}") from None


def _one(mark: pytest.Mark, what: str) -> Any:
    if len(mark.args) != 1:
        raise MarkerError(mark.name, f"takes one {what}, got {len(mark.args)} positional arguments")
    return mark.args[0]


def _capability_args(mark: pytest.Mark, context: MarkContext) -> None:
    names = _capability_names(mark)
    if not names and not mark.kwargs.get("any_of"):
        raise MarkerError(mark.name, "needs at least one capability name (or any_of=[...])")
    for index, name in enumerate(names, 1):
        _known(mark.name, f"argument {index}", name, context)


def _any_of(marker: str, keyword: str, value: Any, context: MarkContext) -> None:
    if value is None:
        return
    if isinstance(value, str):  # iterating it would ask for capabilities 'd', 't', 'y' ...
        raise _bad(marker, f"{keyword}=", "must be a list of capability names", value,
                   f" (write {keyword}=[{short_repr(value)}])")
    if not isinstance(value, (list, tuple)) or not value or \
            not all(isinstance(name, str) and name for name in value):
        raise _bad(marker, f"{keyword}=", "must be a non-empty list of capability names", value)
    for name in value:
        _known(marker, f"{keyword}=", name, context)


def _flag(marker: str, keyword: str, value: Any, context: MarkContext) -> None:
    if not isinstance(value, bool):  # "no" is truthy: it would mean True
        raise _bad(marker, f"{keyword}=", "must be True or False", value)


def _device_count(mark: pytest.Mark, context: MarkContext) -> None:
    count = _one(mark, "device count")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise _bad(mark.name, "count", "must be a positive int", count)


def _memory_size(mark: pytest.Mark, context: MarkContext) -> None:
    parse_size(_one(mark, "size"), marker=mark.name, argument="size")


def _size_keyword(marker: str, keyword: str, value: Any, context: MarkContext) -> None:
    if value is not None:
        parse_size(value, marker=marker, argument=f"{keyword}=")


def _dtype_args(mark: pytest.Mark, context: MarkContext) -> None:
    values = dtype_values(mark)
    if not values:
        raise MarkerError(mark.name, "needs at least one torch.dtype")
    torch = sys.modules.get("torch")  # a torch.dtype argument means torch is imported already
    for index, value in enumerate(values, 1):
        if torch is None or not isinstance(value, torch.dtype):
            raise _bad(mark.name, f"argument {index}", "must be a torch.dtype", value,
                       _dtype_hint(value))


def _dtype_hint(value: Any) -> str:
    if not isinstance(value, str) or not value.isidentifier():
        return ""
    import torch

    return f" (write torch.{value})" if isinstance(getattr(torch, value, None), torch.dtype) else ""


SIGNATURES: dict[str, Signature] = {
    "requires_capability": Signature(_capability_args, {"any_of": _any_of, "native": _flag}),
    "requires_devices": Signature(_device_count, {}),
    "requires_memory": Signature(_memory_size, {"per_allocation": _size_keyword}),
    "dtypes": Signature(_dtype_args, {}, fixture="dtype"),
}
"""Every devcaps marker and what it takes; evaluation may assume a mark that passed."""


def validate_marks(marks: Iterable[pytest.Mark], registry: CapabilityRegistry,
                   fixturenames: Collection[str] | None = None) -> None:
    """Raise :class:`MarkerError` naming the marker and argument for anything a mark does not
    take: unknown capability names, keywords, types or sizes (fails collection). With
    ``fixturenames`` (for a test's own marks), a mark that parametrizes a fixture the test does
    not request is an error too."""
    context = MarkContext(registry, fixturenames)
    for mark in marks:
        signature = SIGNATURES.get(mark.name)
        if signature is None:
            continue
        for keyword in mark.kwargs:
            if keyword not in signature.keywords:
                takes = ", ".join(f"{k}=" for k in signature.keywords) or "no keyword arguments"
                raise MarkerError(mark.name, f"unexpected keyword argument {keyword!r}"
                                  f"{did_you_mean(keyword, signature.keywords)}; it takes {takes}")
        signature.args(mark, context)
        for keyword, value in mark.kwargs.items():
            signature.keywords[keyword](mark.name, keyword, value, context)
        if signature.fixture and fixturenames is not None and signature.fixture not in fixturenames:
            raise MarkerError(mark.name, f"the test takes no {signature.fixture!r} argument, so "
                              f"the mark would parametrize nothing: add a {signature.fixture!r} "
                              "argument or remove the mark")


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*$", re.IGNORECASE)
_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
MAX_SIZE = 2**64
"""The largest size a marker may ask for: a 64-bit address space (16 EiB)."""


def parse_size(value: Any, *, marker: str = "requires_memory", argument: str = "size") -> int:
    """``"24GiB"`` -> bytes; ints are bytes already. Anything else, zero, or more than
    :data:`MAX_SIZE` is a :class:`MarkerError` naming ``marker`` and ``argument``."""
    size = 0
    if isinstance(value, int) and not isinstance(value, bool):
        size = value
    elif isinstance(value, str) and (match := _SIZE.match(value)):
        # Decimal, not float: '9' * 400 + 'TiB' must be "too large", not inf or OverflowError.
        size = int(Decimal(match.group(1)) * _UNITS[(match.group(2) or "B").lower()])
    else:
        raise _bad(marker, argument, "must be a size like '24GiB' or a positive int of bytes", value)
    if not 0 < size <= MAX_SIZE:
        raise _bad(marker, argument, "must be more than 0 bytes and at most 16EiB "
                   "(a 64-bit address space)", value)
    return size


def _format_size(size: int) -> str:
    for unit, factor in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= factor:
            return f"{size / factor:.4g}{unit}"
    return f"{size}B"


def evaluate(marks: Sequence[pytest.Mark], registry: CapabilityRegistry, device: str,
             dtype: Any = None) -> Evaluation:
    """Evaluate the devcaps markers of one test against ``device`` (and its ``dtype`` parameter)."""
    identity = registry.identity(device)
    required: list[str] = []
    missing: list[Missing] = []

    def need(capability: str, *, native: bool, kind: MissingKind = "capability") -> None:
        record = registry.record(capability, identity.key)
        ok = record.level is Level.NATIVE if native else record.level.available
        if not ok:
            what = f"native {capability}" if native else capability
            if record.capability != capability:  # an alias: say which capability answered
                what, capability = f"{what} (alias of {record.capability})", record.capability
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
                                           f"{identity.key}: {detail}", tuple(alternatives)))
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

