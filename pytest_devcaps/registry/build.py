"""Building a registry: the catalogue with hook additions, devices (discovered or from a
profile), probe outcomes, then the merge of every precedence layer.

The fact vocabulary (:mod:`pytest_devcaps.config.facts`) comes from the backend adapters, builtin
and hook-registered, before any YAML is read: hook rules, override files and profiles are all
checked against the facts some backend can actually set.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Mapping

from pytest_devcaps.errors import ConfigError
from pytest_devcaps.model import DeviceIdentity, ProbeOutcome
from pytest_devcaps.registry.layers import (
    CliLayer,
    HookLayer,
    ImpliesLayer,
    Layer,
    OverrideLayer,
    ProbeLayer,
    ProfileLayer,
    RuleLayer,
    merge,
)
from pytest_devcaps.registry.inputs import RegistryOptions, check_setting_devices
from pytest_devcaps.registry.query import CapabilityRegistry
from pytest_devcaps.registry.registrars import BackendRegistrar, CapabilityRegistrar

if TYPE_CHECKING:
    from pytest_devcaps.backends.base import BackendAdapter
    from pytest_devcaps.config.catalogue import Catalogue
    from pytest_devcaps.config.facts import FactVocabulary
    from pytest_devcaps.probes.base import ProbeSpec


def build_registry(options: RegistryOptions = RegistryOptions(), hook: Any = None) -> CapabilityRegistry:
    """Discover devices, probe them (or read the cache), then merge every layer's answers.

    ``hook`` is a pluggy hook relay (``config.hook``) carrying the ``pytest_devcaps_*`` hooks.
    """
    from pytest_devcaps.backends import discover_devices
    from pytest_devcaps.config import load_overrides, load_profile
    from pytest_devcaps.config.facts import fact_vocabulary

    started = time.perf_counter()
    adapters = backend_adapters(hook)
    facts = fact_vocabulary(adapters)
    catalogue, registrar = catalogue_with_hooks(hook, facts)
    probes = _probes(catalogue, registrar)
    _check_settings(options, catalogue)
    overrides = load_overrides(list(options.overrides), catalogue, facts)
    meta: dict[str, Any] = {"overrides": list(options.overrides)}
    layers: list[Layer] = [RuleLayer(catalogue)]
    profile = load_profile(options.profile, catalogue, facts) if options.profile else None
    identities = list(profile.identities) if profile else discover_devices(adapters)
    check_setting_devices(options.settings, identities)  # before probing: a typo costs no probe run
    outcomes: Mapping[str, Mapping[str, ProbeOutcome]] = {}
    if profile is not None:
        layers.append(ProfileLayer(profile))
        meta.update(profile=profile.name, cache="none (profile)")
    else:
        from pytest_devcaps.registry.probing import probe_devices

        results = probe_devices(identities, catalogue, probes, options)
        outcomes = results.outcomes
        layers.append(ProbeLayer(outcomes))
        meta.update(results.meta())
    layers += [OverrideLayer(overrides), CliLayer(options.settings)]
    if hook is not None:
        layers.append(HookLayer(hook, catalogue))
    layers.append(ImpliesLayer(catalogue))
    records = {identity.key: merge(layers, identity, catalogue.names()) for identity in identities}
    meta["build_seconds"] = round(time.perf_counter() - started, 4)
    return CapabilityRegistry(identities, records, catalogue, meta, facts,
                              probe_outcomes=outcomes, probed=list(probes))


def catalogue_with_hooks(hook: Any = None, facts: FactVocabulary | None = None
                         ) -> tuple[Catalogue, CapabilityRegistrar]:
    """The shipped catalogue plus what ``pytest_devcaps_register_capabilities`` adds; hook
    rules may name the facts of ``facts`` (default: those of the builtin and hook backends)."""
    from pytest_devcaps.config import load_catalogue

    registrar = CapabilityRegistrar()
    if hook is not None:
        hook.pytest_devcaps_register_capabilities(registrar=registrar)
    catalogue = load_catalogue()
    if registrar.specs or registrar.rules:
        if facts is None:
            from pytest_devcaps.config.facts import fact_vocabulary

            facts = fact_vocabulary(backend_adapters(hook))
        catalogue = catalogue.with_capabilities(registrar.specs, registrar.rules, facts)
    return catalogue, registrar


def _probes(catalogue: Catalogue, registrar: CapabilityRegistrar) -> dict[str, ProbeSpec]:
    """Builtin and hook probes, keyed by the capability each measures (which must exist)."""
    from pytest_devcaps.probes import builtin_probes

    probes = {**builtin_probes(), **registrar.probes}
    for name in probes:
        if name not in catalogue:
            from pytest_devcaps.config.catalogue import alias_or_unknown

            raise ConfigError(f"a probe is registered for "
                              f"{alias_or_unknown(name, catalogue.capabilities)}",
                              file="pytest_devcaps_register_capabilities")
    return probes


def _check_settings(options: RegistryOptions, catalogue: Catalogue) -> None:
    for setting in options.settings:
        catalogue.check_key(setting.capability, file="command line", key=setting.capability)


def registry_from_snapshot(snapshot: Mapping[str, Any], hook: Any = None) -> CapabilityRegistry:
    """An xdist worker's registry: the controller's answers, with this process's catalogue and
    fact vocabulary (the same hooks run here; a different catalogue is refused)."""
    from pytest_devcaps.config.facts import fact_vocabulary

    facts = fact_vocabulary(backend_adapters(hook))
    catalogue, _ = catalogue_with_hooks(hook, facts)
    return CapabilityRegistry.from_snapshot(snapshot, catalogue, facts)


def backend_adapters(hook: Any = None) -> list[BackendAdapter]:
    """The builtin backend adapters plus those ``pytest_devcaps_register_backends`` adds."""
    from pytest_devcaps.backends import builtin_backends

    registrar = BackendRegistrar(list(builtin_backends()))
    if hook is not None:
        hook.pytest_devcaps_register_backends(registrar=registrar)
    return registrar.adapters


def discover(hook: Any = None) -> list[DeviceIdentity]:
    """The builtin backends' devices plus those of backends added by hooks (cpu first)."""
    from pytest_devcaps.backends import discover_devices

    return discover_devices(backend_adapters(hook))

