"""Marker registration and evaluation: pure functions returning frozen records with a reason."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Collection, Iterable, Literal, Mapping, Sequence

import pytest

from pytest_devcaps._util.sizes import MAX_SIZE, format_size, size_bytes
from pytest_devcaps.marks import conditions, expectations, tolerances
from pytest_devcaps.marks import hardware as hardware_classes
from pytest_devcaps.errors import (
    MarkerError,
    UnknownCapabilityError,
    UnknownDeviceError,
    did_you_mean,
    short_repr,
)
from pytest_devcaps.model import DeviceIdentity, Level
from pytest_devcaps.marks.tolerances import dtype_name

__all__ = ["SIGNATURES", "Evaluation", "Missing", "capability_names", "check_keywords",
           "dtype_name", "dtypes_for", "evaluate", "free_memory_missing", "parse_size",
           "validate_marks"]

if TYPE_CHECKING:
    from pytest_devcaps.registry import CapabilityRegistry



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


def capability_names(mark: pytest.Mark) -> list[str]:
    """The capability names a ``requires_capability`` mark lists positionally."""
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
    names = capability_names(mark)
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
    count = _one(mark, "rank count" if mark.name == "requires_ranks" else "device count")
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


def _dtypes_when(marker: str, keyword: str, value: Any, context: MarkContext) -> None:
    """``when={device type or vendor: (dtypes...)}``: the keys name devices, the values dtypes."""
    if value is None:
        return
    if not isinstance(value, dict) or not value:
        raise _bad(marker, f"{keyword}=", "must map device types or vendors to tuples of dtypes",
                   value)
    known = conditions.device_names(context.registry)
    for key, dtypes in value.items():
        if key not in known:
            raise MarkerError(marker, f"{keyword}= key {short_repr(key)} is not a device type or "
                                      f"vendor{did_you_mean(str(key), known)}")
        listed = dtypes if isinstance(dtypes, (list, tuple)) else (dtypes,)
        _dtype_args(pytest.mark.dtypes(*listed).mark, context)


def _expectation_args(mark: pytest.Mark, context: MarkContext) -> None:
    """``skip_on`` / ``xfail_on`` / ``tolerance``: parsed whole (condition, reason, values)."""
    facts = conditions.known_facts(context.registry)
    if mark.name == tolerances.MARKER:
        tolerances.parse_tolerance(mark.args, mark.kwargs, facts)
    else:
        expectations.parse_condition(mark.name, mark.args, mark.kwargs, facts)


def _hardware_args(mark: pytest.Mark, context: MarkContext) -> None:
    hardware_classes.check_class(_one(mark, "hardware class"), lambda: context.registry,
                                 marker=mark.name)


def _parsed(marker: str, keyword: str, value: Any, context: MarkContext) -> None:
    """A keyword the marker's argument check parses with the rest."""


SIGNATURES: dict[str, Signature] = {
    "requires_capability": Signature(_capability_args, {"any_of": _any_of, "native": _flag}),
    "requires_devices": Signature(_device_count, {}),
    "requires_ranks": Signature(_device_count, {}),  # checked at setup: marks/multiprocess.py
    "requires_memory": Signature(_memory_size, {"per_allocation": _size_keyword, "free": _flag}),
    "dtypes": Signature(_dtype_args, {"when": _dtypes_when}, fixture="dtype"),
    "skip_on": Signature(_expectation_args, {"when": _parsed, "reason": _parsed}),
    "xfail_on": Signature(_expectation_args, {"when": _parsed, "reason": _parsed,
                                              "strict": _parsed, "raises": _parsed}),
    "tolerance": Signature(_expectation_args, {"dtype": _parsed, "atol": _parsed,
                                               "rtol": _parsed, "when": _parsed}),
    "hardware": Signature(_hardware_args, {}),
}
"""Every devcaps marker and what it takes; evaluation may assume a mark that passed."""


def validate_marks(marks: Iterable[pytest.Mark], registry: CapabilityRegistry,
                   fixturenames: Collection[str] | None = None) -> None:
    """Raise :class:`MarkerError` naming the marker and argument for anything a mark does not
    take: unknown capability names, keywords, types or sizes (the test errors at setup). With
    ``fixturenames`` (for a test's own marks), a mark that parametrizes a fixture the test does
    not request is an error too."""
    context = MarkContext(registry, fixturenames)
    for mark in marks:
        signature = SIGNATURES.get(mark.name)
        if signature is None:
            continue
        check_keywords(mark.name, mark.kwargs)
        signature.args(mark, context)
        for keyword, value in mark.kwargs.items():
            signature.keywords[keyword](mark.name, keyword, value, context)
        # devcaps_<fixture> is the same fixture under a name a project's own does not take
        if signature.fixture and fixturenames is not None and signature.fixture not in fixturenames \
                and f"devcaps_{signature.fixture}" not in fixturenames:
            raise MarkerError(mark.name, f"the test takes no {signature.fixture!r} argument, so "
                              f"the mark would parametrize nothing: add a {signature.fixture!r} "
                              "argument or remove the mark")


def check_keywords(marker: str, kwargs: Mapping[str, Any]) -> None:
    """Refuse a keyword ``marker`` does not take, naming the closest one it does."""
    keywords = SIGNATURES[marker].keywords
    for keyword in kwargs:
        if keyword not in keywords:
            takes = ", ".join(f"{k}=" for k in keywords) or "no keyword arguments"
            raise MarkerError(marker, f"unexpected keyword argument {keyword!r}"
                              f"{did_you_mean(keyword, keywords)}; it takes {takes}")


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
    if chosen is None:
        return dtype_values(mark)
    return list(chosen) if isinstance(chosen, (list, tuple)) else [chosen]


def parse_size(value: Any, *, marker: str = "requires_memory", argument: str = "size") -> int:
    """``"24GiB"`` -> bytes; ints are bytes already. Anything else, zero, or more than
    :data:`~pytest_devcaps._util.sizes.MAX_SIZE` is a :class:`MarkerError` naming ``marker``
    and ``argument``."""
    size = size_bytes(value)
    if size is None:
        raise _bad(marker, argument, "must be a size like '24GiB' or a positive int of bytes", value)
    if not 0 < size <= MAX_SIZE:
        raise _bad(marker, argument, "must be more than 0 bytes and at most 16EiB "
                   "(a 64-bit address space)", value)
    return size



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
    if record.capability != capability:  # an alias: say which capability answered
        what, capability = f"{what} (alias of {record.capability})", record.capability
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
                                   f"{identity.key}: {detail}", tuple(alternatives)))
    return missing


def _memory_check(mark: pytest.Mark, identity: DeviceIdentity, required: list[str]) -> list[Missing]:
    found: list[Missing] = []
    total = parse_size(mark.args[0])
    key = f"memory>={format_size(total)}"
    required.append(key)
    if mark.kwargs.get("free"):
        required.append(f"free {key}")
    have = identity.memory_bytes
    if have is None or have < total:
        seen = "unknown" if have is None else format_size(have)
        found.append(Missing("memory", key, identity.key, seen, "discovery",
                             f"requires {format_size(total)} memory on {identity.key}; found {seen}"))
    per_allocation = mark.kwargs.get("per_allocation")
    if per_allocation is not None:
        wanted = parse_size(per_allocation)
        # Backends whose single allocations are capped below total memory report the cap as
        # max_allocation_bytes (None when the cap exists but cannot be read, as on MPS).
        if "max_allocation_bytes" in identity.facts:
            cap = identity.facts["max_allocation_bytes"]
        else:
            cap = identity.memory_bytes
        akey = f"allocation>={format_size(wanted)}"
        required.append(akey)
        if cap is None or cap < wanted:
            seen = "unknown" if cap is None else format_size(int(cap))
            found.append(Missing("memory", akey, identity.key, seen, "discovery",
                                 f"requires a single {format_size(wanted)} allocation on "
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
            found.append(Missing("memory", f"free memory>={format_size(wanted)}", identity.key,
                                 format_size(free), "runtime",
                                 f"requires {format_size(wanted)} free memory on {identity.key}; "
                                 f"found {format_size(free)} free"))
    return found
