"""``when=`` conditions of markers: the override files' expression language over device facts.

``skip_on``, ``xfail_on``, ``tolerance`` and ``dtypes`` take conditions written exactly as the
``when:`` of an override file or vendor rule (``vendor == 'nvidia' and compute_capability <
9.0``), compiled by :func:`pytest_devcaps.config.expressions.compile_expression` (no ``eval``).
A fact name no backend declares is a :class:`MarkerError` naming the closest known fact, so
a typo never makes a condition silently false.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from pytest_devcaps.config.catalogue import format_fact
from pytest_devcaps.config.expressions import Expression, compile_expression, quoted
from pytest_devcaps.errors import ConfigError, MarkerError
from pytest_devcaps.model import DeviceIdentity

if TYPE_CHECKING:
    from pytest_devcaps.config.facts import FactVocabulary
    from pytest_devcaps.registry import CapabilityRegistry

def known_facts(registry: CapabilityRegistry) -> FactVocabulary:
    """The facts a condition may use: the registry's vocabulary (the identity fields and every
    fact its backend adapters declare, the hook-registered ones included)."""
    return registry.facts


_COMPILED: dict[tuple[str, str], Expression] = {}


def compile_condition(marker: str, text: Any, facts: FactVocabulary) -> Expression:
    """``text`` compiled against the fact vocabulary ``facts`` (an unknown fact name is refused
    with the closest known one; version facts compare as versions, ``runtime_version < 12.10``
    as the release numbers read); raises :class:`MarkerError`."""
    if not isinstance(text, str):
        raise MarkerError(marker, "when= takes a condition over device facts like "
                                  f"\"vendor == 'nvidia' and compute_capability < 9.0\", got {text!r}")
    key = (text, facts.digest())
    if key not in _COMPILED:
        try:
            _COMPILED[key] = compile_expression(text, facts=facts)
        except ConfigError as exc:  # its message ends with the condition, which we name first
            message = exc.message.removesuffix(f": {quoted(text)}")
            raise MarkerError(marker, f"when={text!r}: {message}") from None
    return _COMPILED[key]


def describe_facts(expression: Expression, facts: Mapping[str, Any]) -> str:
    """The facts a condition reads, with this device's values: ``vendor=nvidia, arch=sm_89``."""
    return ", ".join(f"{name}={format_fact(facts.get(name))}" for name in sorted(expression.names))


def holds(expression: Expression, identity: DeviceIdentity) -> bool:
    """Whether the condition holds for ``identity`` (never raises on odd fact values)."""
    return expression.evaluate(identity.rule_facts())


def static_device_names() -> tuple[str, ...]:
    """Device types (``torch.device`` types and PyTorch's ``privateuse1`` alias) and vendors
    (``DeviceIdentity.vendor``) known without a registry."""
    from pytest_devcaps.config.catalogue import KNOWN_VENDORS
    from pytest_devcaps.backends.dispatch import PRIVATEUSE1_ALIAS
    from pytest_devcaps.model import KNOWN_DEVICE_TYPES

    return tuple(dict.fromkeys([*KNOWN_DEVICE_TYPES, PRIVATEUSE1_ALIAS, *KNOWN_VENDORS]))


def device_names(registry: CapabilityRegistry | None = None) -> tuple[str, ...]:
    """Device types and vendors a marker may name: the static ones, plus this registry's
    (an out-of-tree backend's type and vendor)."""
    names = list(static_device_names())
    if registry is not None:
        for identity in registry.devices:
            names += [identity.type, str(identity.vendor).lower()]
    return tuple(dict.fromkeys(names))


def names_device(name: str, identity: DeviceIdentity) -> bool:
    """Whether ``name`` (a device type, vendor or ``privateuse1``) names ``identity``."""
    if name in (identity.type, str(identity.vendor).lower()):
        return True
    if name == "privateuse1":
        from pytest_devcaps.backends.dispatch import DispatchKeyError, dispatch_key

        try:
            return dispatch_key(identity.type) == "PrivateUse1"
        except DispatchKeyError:
            return False
    return False
