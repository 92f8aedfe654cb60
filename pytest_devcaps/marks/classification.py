"""Hardware classification of tests: ``generic`` | ``accelerator`` | ``<device type or vendor>``.

After PyTorch's ``HardwareClassification`` (upstream ``common_utils``, PR #186918: GENERIC,
ACCELERATOR, CPU, CUDA, MPS, XPU; not in torch 2.13): ``generic`` runs anywhere, the CPU
included; ``accelerator`` needs some accelerator, of any vendor; a device type (``cuda``,
``xpu``, ``privateuse1``...) or vendor (``nvidia``, ``amd``...) names the only hardware a test is
for. A test declares it with ``@pytest.mark.hardware("accelerator")`` (the closest mark wins)
or its class's ``hw_classification`` attribute (PyTorch's enum or a string). An undeclared test
is ``accelerator`` when a requirement of it is one only accelerators meet, else ``generic``.

"Only accelerators meet" is read from the catalogue: every rule the catalogue has for the
``cpu`` vendor (its own, then ``"*"``) gives a level the requirement refuses, and one of them
holds unconditionally (``runtime.graphs``, ``dist.nccl``; native fp8); or the
test requires two or more devices of its type (a CPU is one device). ``requires_ranks(n)`` is
not such a requirement: the ranks of a multi-process world share the CPU (gloo), so it leaves a
test ``generic``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from pytest_devcaps.marks.pytorch_gates import Gate, devices_needed, strictest

from pytest_devcaps.errors import ConfigError, MarkerError
from pytest_devcaps.marks.hardware import ACCELERATOR, ATTRIBUTE, GENERIC, MARKER, check_class
from pytest_devcaps.marks.evaluation import capability_names
from pytest_devcaps.model import Level

CPU_VENDOR = "cpu"

if TYPE_CHECKING:
    import pytest

    from pytest_devcaps.config.catalogue import Catalogue


@dataclass(frozen=True)
class Classification:
    """A test's hardware class, and why: ``declared`` (mark or attribute) or ``inferred``."""

    value: str
    how: str
    gates: tuple[Gate, ...] = ()

    @property
    def inferred(self) -> bool:
        return self.how != "declared"

    @property
    def devices(self) -> int:
        """Devices of one type PyTorch's gates need (0: none said)."""
        return devices_needed(self.gates)


def declared(marks: Iterable[pytest.Mark], cls: type | None) -> Any:
    """The class a test declares (the closest ``hardware`` mark, else ``hw_classification``)."""
    for mark in marks:
        if mark.name == MARKER:
            if len(mark.args) != 1 or mark.kwargs:
                raise MarkerError(MARKER, f"takes one class ({GENERIC}, {ACCELERATOR}, a device "
                                          f"type or vendor), got {mark.args!r} {mark.kwargs!r}")
            return mark.args[0]
    return None if cls is None else getattr(cls, ATTRIBUTE, None)


def accelerator_only(catalogue: Catalogue, capability: str, *, native: bool) -> bool:
    """Whether the catalogue's CPU rules rule ``capability`` out on every CPU."""
    rules = catalogue.rules_for(CPU_VENDOR, capability)
    acceptable = (Level.NATIVE,) if native else (Level.NATIVE, Level.EMULATED)
    return (bool(rules) and all(rule.level not in acceptable for rule in rules)
            and any(rule.when is None for rule in rules))


def _canonical(catalogue: Catalogue, name: str) -> str | None:
    """The capability ``name`` names (an alias resolved); None for an unknown name."""
    return catalogue.resolve(name)


def needs_accelerator(marks: Sequence[pytest.Mark], catalogue: Catalogue) -> str | None:
    """The first requirement only accelerators meet, as text; None when a CPU can meet all."""
    for mark in marks:
        if mark.name == "requires_devices" and mark.args and isinstance(mark.args[0], int) \
                and mark.args[0] >= 2:
            return f"requires_devices({mark.args[0]})"
        if mark.name != "requires_capability":
            continue
        native = bool(mark.kwargs.get("native", False))
        for written in capability_names(mark):
            name = _canonical(catalogue, written)
            if name and accelerator_only(catalogue, name, native=native):
                return f"{'native ' if native else ''}{name}"
        any_of = mark.kwargs.get("any_of") or ()
        if not isinstance(any_of, (list, tuple)):
            continue  # a bad mark: that test errors at setup (plugin), it has no class to infer
        alternatives = [c for a in any_of if (c := _canonical(catalogue, a))]
        if alternatives and all(accelerator_only(catalogue, a, native=native) for a in alternatives):
            return f"any_of({','.join(alternatives)})"
    return None


def classify(marks: Sequence[pytest.Mark], cls: type | None, registry_of: Any,
             gates: tuple[Gate, ...] = ()) -> Classification:
    """The class of one test from its marks (closest first), class and PyTorch gates
    (:mod:`pytest_devcaps.marks.pytorch_gates`). ``registry_of`` gives the registry, asked only
    when a requirement must be read or a name is not a static one. A declared class wins;
    else the narrowest of what the gates and the requirements say."""
    value = declared(marks, cls)
    if value is not None:
        return Classification(check_class(value, registry_of), "declared", gates)
    found = Classification(GENERIC, "inferred", gates)
    if any(m.name in ("requires_capability", "requires_devices") for m in marks):
        reason = needs_accelerator(marks, registry_of().catalogue)
        if reason is not None:
            found = Classification(ACCELERATOR, f"inferred from {reason}", gates)
    gate = strictest(gates)
    if gate is not None and gate.hardware is not None and rank(gate.hardware) > rank(found.value):
        found = Classification(gate.hardware, f"inferred from {gate.name} ({gate.source})", gates)
    return found


def rank(value: str) -> int:
    """How much a class narrows: generic 0, accelerator 1, a device type or vendor 2."""
    return {GENERIC: 0, ACCELERATOR: 1}.get(value, 2)


def mismatch(value: str, identity: Any) -> str | None:
    """Why a test of class ``value`` does not run on ``identity`` (a DeviceIdentity), or None:
    ``generic`` runs anywhere, ``accelerator`` anywhere but the CPU, a device type or vendor
    only there."""
    if value == GENERIC:
        return None
    if value == ACCELERATOR:
        if identity.type in (CPU_VENDOR, "meta"):
            return (f"hardware class {ACCELERATOR} needs an accelerator; this test's device is "
                    f"{identity.key}")
        return None
    if value in (identity.type, identity.vendor):
        return None
    return f"hardware class {value} runs only on {value}; this test's device is {identity.key}" + \
        (f" ({identity.vendor})" if identity.vendor and identity.vendor != identity.type else "")


def parse_selection(text: Iterable[str], source: str, registry_of: Any = None) -> tuple[str, ...]:
    """``--devcaps-hardware`` values checked against the vocabulary (ConfigError on a typo)."""
    chosen = []
    for item in text:
        try:
            chosen.append(check_class(item, registry_of))
        except MarkerError as exc:
            raise ConfigError(exc.message, file=source) from None
    return tuple(dict.fromkeys(chosen))
