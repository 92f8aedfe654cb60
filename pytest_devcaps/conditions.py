"""``when=`` conditions of markers: the override files' expression language over device facts.

``skip_on``, ``xfail_on``, ``tolerance`` and ``dtypes`` take conditions written exactly as the
``when:`` of an override file or vendor rule (``vendor == 'nvidia' and compute_capability <
9.0``), compiled by :func:`pytest_devcaps.config.expressions.compile_expression` (no ``eval``).
A fact name no backend or rule knows is a :class:`MarkerError` naming the closest known fact, so
a typo never makes a condition silently false.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from pytest_devcaps.config.catalogue import format_fact
from pytest_devcaps.config.expressions import Expression, compile_expression
from pytest_devcaps.errors import ConfigError, MarkerError, did_you_mean
from pytest_devcaps.model import DeviceIdentity

if TYPE_CHECKING:
    from pytest_devcaps.registry import CapabilityRegistry

#: Facts every device has (the named fields of DeviceIdentity, as ``rule_facts()`` gives them).
COMMON_FACTS: frozenset[str] = frozenset(
    DeviceIdentity(type="cpu", index=None, vendor="cpu", name="cpu", arch="").rule_facts())


@functools.lru_cache(maxsize=1)
def _profile_facts() -> frozenset[str]:
    """Every fact the shipped device profiles give their devices (every builtin vendor's)."""
    from pytest_devcaps.config import list_profiles, load_catalogue, load_profile

    catalogue = load_catalogue()
    return frozenset(name for profile in list_profiles()
                     for identity in load_profile(profile, catalogue).identities
                     for name in identity.rule_facts())


@functools.lru_cache(maxsize=8)
def known_facts(registry: CapabilityRegistry) -> frozenset[str]:
    """Fact names a condition may use: the common ones, the facts of every shipped profile
    (``gcn_arch`` and ``rocm_version`` on a machine without an AMD GPU...), every discovered
    (or profiled) device's facts (an out-of-tree backend's), and every fact a vendor rule of the
    catalogue tests."""
    names = set(COMMON_FACTS) | _profile_facts()
    for identity in registry.devices:
        names.update(identity.rule_facts())
    for by_capability in registry.catalogue.rules.values():
        for rules in by_capability.values():
            for rule in rules:
                if rule.when is not None:
                    names.update(rule.when.names)
    return frozenset(names)


@functools.lru_cache(maxsize=512)
def _compile(text: str) -> Expression:
    return compile_expression(text)


def compile_condition(marker: str, text: Any, facts: Iterable[str]) -> Expression:
    """``text`` compiled, its fact names checked against ``facts``; raises :class:`MarkerError`."""
    if not isinstance(text, str):
        raise MarkerError(marker, "when= takes a condition over device facts like "
                                  f"\"vendor == 'nvidia' and compute_capability < 9.0\", got {text!r}")
    try:
        expression = _compile(text)
    except ConfigError as exc:
        raise MarkerError(marker, f"when={text!r}: {exc.message}") from None
    known = sorted(facts)
    unknown = sorted(expression.names - set(known))
    if unknown:
        raise MarkerError(marker, f"unknown device fact {unknown[0]!r}"
                                  f"{did_you_mean(unknown[0], known)} in when={text!r}; "
                                  f"known facts: {', '.join(known)}")
    return expression


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
    from pytest_devcaps.dispatch import PRIVATEUSE1_ALIAS
    from pytest_devcaps.options import KNOWN_DEVICE_TYPES

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
        from pytest_devcaps.dispatch import DispatchKeyError, dispatch_key

        try:
            return dispatch_key(identity.type) == "PrivateUse1"
        except DispatchKeyError:
            return False
    return False
