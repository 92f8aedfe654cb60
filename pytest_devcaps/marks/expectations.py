"""Per-device expectations: ``skip_on(when=, reason=)`` and ``xfail_on(when=, reason=, strict=, raises=)``.

For what capabilities cannot name ("known broken on sm_89"): a condition over device facts
(:mod:`pytest_devcaps.marks.conditions`). Parsing and evaluation are pure; the pytest side (a skip
in the test's evaluation, an ``xfail`` mark) and the unittest side (``SkipTest``, an expected
failure) both start from :class:`Condition`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_devcaps.marks.conditions import compile_condition, describe_facts, holds
from pytest_devcaps.config.expressions import Expression
from pytest_devcaps.errors import MarkerError
from pytest_devcaps.model import DeviceIdentity

if TYPE_CHECKING:
    from pytest_devcaps.config.facts import FactVocabulary


@dataclass(frozen=True)
class Condition:
    """One ``skip_on`` / ``xfail_on`` mark, validated."""

    marker: str
    expression: Expression
    reason: str
    strict: bool = False
    raises: Any = None

    @property
    def key(self) -> str:
        """``skip_on(vendor == 'nvidia')``: what reports group by."""
        return f"{self.marker}({self.expression.text})"

    def found(self, identity: DeviceIdentity) -> str:
        return describe_facts(self.expression, identity.rule_facts())

    def applies(self, identity: DeviceIdentity) -> bool:
        return holds(self.expression, identity)

    def describe(self, identity: DeviceIdentity) -> str:
        """``skip_on(vendor == 'nvidia') holds on cuda:0 (vendor=nvidia): cuDNN 9.1 bug``."""
        return f"{self.key} holds on {identity.key} ({self.found(identity)}): {self.reason}"


def parse_condition(marker: str, args: tuple[Any, ...], kwargs: Any,
                    facts: FactVocabulary) -> Condition:
    """A ``skip_on`` / ``xfail_on`` mark's arguments as a :class:`Condition` (or MarkerError);
    unknown keywords are refused before (``markers.check_keywords``)."""
    if len(args) > 1 or (args and "when" in kwargs):
        raise MarkerError(marker, f"takes one condition (positional or when=), got {args!r}")
    when = args[0] if args else kwargs.get("when")
    if when is None:
        raise MarkerError(marker, "needs when=\"<condition over device facts>\"")
    expression = compile_condition(marker, when, facts)
    reason = kwargs.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise MarkerError(marker, f"needs reason=\"why it is expected on such devices\", got {reason!r}")
    strict = kwargs.get("strict", False)
    if not isinstance(strict, bool):
        raise MarkerError(marker, f"strict= takes True or False, got {strict!r}")
    raises = kwargs.get("raises")
    if raises is not None and not _exception_types(raises):
        raise MarkerError(marker, f"raises= takes an exception type or a tuple of them, got {raises!r}")
    return Condition(marker, expression, reason.strip(), strict, raises)


def _exception_types(value: Any) -> bool:
    values = value if isinstance(value, tuple) else (value,)
    return bool(values) and all(isinstance(v, type) and issubclass(v, BaseException) for v in values)
