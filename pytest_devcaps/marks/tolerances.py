"""Per-device tolerances: ``@pytest.mark.tolerance(dtype=, atol=, rtol=, when=)`` and what the
``tolerances`` fixture (or ``self.tolerances`` of a TestCase) gives a test.

In the spirit of PyTorch's ``toleranceOverride`` (``common_device_type.tol(atol, rtol)`` per
dtype) and transformers' ``Expectations`` (values keyed by device type and version), with the
device chosen by a ``when=`` condition over device facts. Which rule wins for a dtype: one
whose ``when`` holds beats one without ``when``; one naming the dtype beats one for every dtype;
then the marker closest to the test (function, class, module) first. Without a matching rule
there is no override and ``torch.testing.assert_close`` uses its own per-dtype defaults.

The rule is the test's, by its ``dtype`` parameter: a bf16 test that compares upcast tensors
(``tolerances.assert_close(got.float(), ref)``) is held to its bf16 rule, not to float32's
defaults; a floating dtype no rule names (``kwargs(torch.float32)`` there) takes the test's
dtype's rule too. A failing comparison says which rule applied (or that none did).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from pytest_devcaps.marks.conditions import compile_condition, holds
from pytest_devcaps.config.expressions import Expression
from pytest_devcaps.errors import MarkerError, did_you_mean
from pytest_devcaps.model import DeviceIdentity

if TYPE_CHECKING:
    from pytest_devcaps.config.facts import FactVocabulary

MARKER = "tolerance"


def dtype_name(dtype: Any) -> str:
    """``torch.bfloat16`` -> ``bfloat16`` (works on anything whose str is ``torch.<name>``)."""
    return str(dtype).rsplit(".", 1)[-1]


@dataclass(frozen=True)
class Tolerance:
    """Absolute and relative tolerance for one dtype on one device, and the rule that gave it."""

    atol: float
    rtol: float
    source: str

    def kwargs(self) -> dict[str, float]:
        return {"atol": self.atol, "rtol": self.rtol}


@dataclass(frozen=True)
class ToleranceRule:
    """One ``tolerance`` mark: ``dtypes`` (None: every dtype), values, optional condition."""

    dtypes: tuple[str, ...] | None
    atol: float
    rtol: float
    when: Expression | None

    def describe(self) -> str:
        parts = [f"dtype={'|'.join(self.dtypes)}" if self.dtypes else "every dtype"]
        if self.when is not None:
            parts.append(f"when={self.when.text}")
        return f"tolerance({', '.join(parts)})"


def _number(name: str, value: Any) -> float:
    """A finite number >= 0 (NaN would compare as nothing and pass or fail every value; an
    infinite tolerance passes everything)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            math.isfinite(value) and value >= 0):
        raise MarkerError(MARKER, f"{name}= takes a finite number >= 0, got {value!r}")
    return float(value)


def _floating_name(dtype: Any) -> bool:
    """The test's ``dtype`` parameter is a floating or complex dtype (a dtype, or its name)."""
    if isinstance(dtype, str):
        import torch

        dtype = getattr(torch, dtype, None)
    return dtype is not None and _floating(dtype)


def _floating(dtype: Any) -> bool:
    """A floating or complex torch dtype (asked of the dtype itself: no torch import)."""
    return bool(getattr(dtype, "is_floating_point", False) or getattr(dtype, "is_complex", False))


def _dtype_names(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    import torch

    values = value if isinstance(value, (list, tuple)) else (value,)
    names = []
    for item in values:
        name = item if isinstance(item, str) else dtype_name(item)
        if not isinstance(getattr(torch, name, None), torch.dtype):
            known = [n for n in dir(torch) if isinstance(getattr(torch, n, None), torch.dtype)]
            raise MarkerError(MARKER, f"dtype={item!r} is not a torch dtype{did_you_mean(name, known)}")
        names.append(dtype_name(getattr(torch, name)))
    return tuple(names)


def parse_tolerance(args: tuple[Any, ...], kwargs: Any, facts: FactVocabulary) -> ToleranceRule:
    """A ``tolerance`` mark's arguments as a :class:`ToleranceRule` (or MarkerError)."""
    if args:
        raise MarkerError(MARKER, f"takes keywords only (dtype=, atol=, rtol=, when=), got {args!r}")
    missing = [name for name in ("atol", "rtol") if name not in kwargs]
    if missing:
        raise MarkerError(MARKER, f"needs both atol= and rtol= (missing {', '.join(missing)}=)")
    when = kwargs.get("when")
    return ToleranceRule(
        dtypes=_dtype_names(kwargs.get("dtype")),
        atol=_number("atol", kwargs["atol"]),
        rtol=_number("rtol", kwargs["rtol"]),
        when=None if when is None else compile_condition(MARKER, when, facts),
    )


class Tolerances:
    """The tolerance rules of one test, seen from its device (and its ``dtype`` parameter)."""

    def __init__(self, rules: Sequence[ToleranceRule], identity: DeviceIdentity,
                 dtype: Any = None) -> None:
        self.identity = identity
        self.dtype = dtype
        self._rules = [rule for rule in rules if rule.when is None or holds(rule.when, identity)]

    def _best(self, name: str | None) -> ToleranceRule | None:
        ranked = sorted(
            (rule for rule in self._rules if rule.dtypes is None or name in rule.dtypes),
            key=lambda rule: (rule.when is None, rule.dtypes is None))  # stable: closest first
        return ranked[0] if ranked else None

    def _found(self, names: Sequence[Any]) -> Tolerance | None:
        """The rule of the first of ``names`` (dtypes) that one matches."""
        for dtype in names:
            name = None if dtype is None else dtype_name(dtype)
            best = self._best(name)
            if best is not None:
                return Tolerance(best.atol, best.rtol, f"{best.describe()} on {self.identity.key}")
        return None

    def for_dtype(self, dtype: Any = None) -> Tolerance | None:
        """The override for ``dtype`` (default: the test's dtype); None when no rule matches.
        A floating ``dtype`` no rule matches takes the test's dtype's rule (a comparison upcast
        to float32 in a bf16 test is the bf16 test's)."""
        if dtype is None:
            return self._found([self.dtype])
        upcast = _floating(dtype) and _floating_name(self.dtype)
        return self._found([dtype, self.dtype] if upcast else [dtype])

    def for_comparison(self, dtype: Any) -> Tolerance | None:
        """The override for comparing tensors of ``dtype`` in this test: the test's dtype's
        rule first when both are floating (upcast or downcast, the test's rule holds), then
        ``dtype``'s own."""
        if _floating(dtype) and _floating_name(self.dtype):
            return self._found([self.dtype, dtype])
        return self.for_dtype(dtype)

    def kwargs(self, dtype: Any = None) -> dict[str, float]:
        """``{"atol": ..., "rtol": ...}`` to splat into ``assert_close``; ``{}`` without an override."""
        found = self.for_dtype(dtype)
        return {} if found is None else found.kwargs()

    @property
    def atol(self) -> float | None:
        found = self.for_dtype()
        return None if found is None else found.atol

    @property
    def rtol(self) -> float | None:
        found = self.for_dtype()
        return None if found is None else found.rtol

    def assert_close(self, actual: Any, expected: Any, **kwargs: Any) -> None:
        """``torch.testing.assert_close`` with this test's tolerance for ``actual``'s dtype on
        this device (:meth:`for_comparison`; explicit ``atol``/``rtol`` keywords win). A failure
        says which rule applied, or that torch's defaults did."""
        import torch

        dtype = getattr(actual, "dtype", None)
        found = self.for_comparison(dtype)
        merged = {**({} if found is None else found.kwargs()), **kwargs}
        try:
            torch.testing.assert_close(actual, expected, **merged)
        except AssertionError as error:
            error.args = (f"{error}\n{self._applied(found, dtype, kwargs)}", *error.args[1:])
            raise

    def _applied(self, found: Tolerance | None, dtype: Any, given: Any) -> str:
        """The line a failed comparison ends with: the tolerance it was held to, and why."""
        compared = "" if dtype is None else f" (tensors of {dtype_name(dtype)}"
        if compared and self.dtype is not None and dtype_name(self.dtype) != dtype_name(dtype):
            compared += f" in a {dtype_name(self.dtype)} test"
        compared += ")" if compared else ""
        explicit = {k: given[k] for k in ("atol", "rtol") if k in given}
        if explicit:
            values = ", ".join(f"{k}={v}" for k, v in explicit.items())
            over = "" if found is None else f" over {found.source}"
            return f"tolerance: {values} given to assert_close{over}{compared}"
        if found is None:
            return (f"tolerance: no tolerance rule for this test on {self.identity.key}: "
                    f"torch.testing.assert_close's defaults{compared}")
        return f"tolerance: atol={found.atol:g}, rtol={found.rtol:g} from {found.source}{compared}"

    def __repr__(self) -> str:
        return f"<Tolerances {self.identity.key}: {len(self._rules)} matching rule(s)>"
