"""Probe outcomes for discovered devices: from the on-disk cache, else from a probe run.

Identical devices (same type, vendor, name and arch) share one probe run. The cache key
covers the device model, the catalogue and the probe functions, so any change re-probes.
Only the capabilities the cache lacks are probed (a file missing entries is completed, not
trusted as complete); transient outcomes (timeouts, runner failures) are never stored.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from pytest_devcaps.model import DeviceIdentity, ProbeOutcome

if TYPE_CHECKING:
    from pytest_devcaps.registry.cache import ProbeCache
    from pytest_devcaps.config.catalogue import Catalogue
    from pytest_devcaps.probes.base import ProbeSpec
    from pytest_devcaps.registry.inputs import RegistryOptions


@dataclass
class ProbeResults:
    """Outcomes per device key, and how they were obtained (for the report header)."""

    outcomes: dict[str, dict[str, ProbeOutcome]] = field(default_factory=dict)
    cache_status: list[str] = field(default_factory=list)
    seconds: float = 0.0
    cache_dir: str = ""

    def meta(self) -> dict[str, Any]:
        return {"cache": ",".join(self.cache_status) or "none",
                "probe_seconds": round(self.seconds, 3), "cache_dir": self.cache_dir}


def _model(identity: DeviceIdentity) -> tuple[str, str, str, str]:
    return (identity.type, identity.vendor, identity.name, identity.arch)


def probe_devices(identities: Sequence[DeviceIdentity], catalogue: Catalogue,
                  probes: Mapping[str, ProbeSpec], options: RegistryOptions) -> ProbeResults:
    """Outcomes of every registered probe of a catalogue capability, for every device."""
    from pytest_devcaps.registry.cache import ProbeCache

    specs = {name: spec for name, spec in probes.items() if name in catalogue}
    cache = ProbeCache(options.cache_dir)
    results = ProbeResults(cache_dir=str(cache.directory))
    by_model: dict[tuple[str, str, str, str], dict[str, ProbeOutcome]] = {}
    for identity in identities:
        if _model(identity) not in by_model:
            by_model[_model(identity)] = _probe_model(identity, catalogue, specs, cache,
                                                      options, results)
        results.outcomes[identity.key] = by_model[_model(identity)]
    return results


def _probe_model(identity: DeviceIdentity, catalogue: Catalogue, specs: Mapping[str, ProbeSpec],
                 cache: ProbeCache, options: RegistryOptions,
                 results: ProbeResults) -> dict[str, ProbeOutcome]:
    """One device model's outcomes: the cached ones, plus a probe run for what is missing."""
    from pytest_devcaps.registry.cache import CacheLookup, fingerprint
    from pytest_devcaps.probes import run_probes

    key = fingerprint({
        "identity": {**identity.to_dict(), "index": None},
        "catalogue": catalogue.digest,
        "probes": sorted(f"{name}={spec.target}" for name, spec in specs.items()),
    })
    lookup = CacheLookup() if options.reprobe else cache.load(key)
    cached = {name: outcome for name, outcome in lookup.outcomes.items() if name in specs}
    missing = {name: spec for name, spec in specs.items() if name not in cached}
    if options.reprobe:
        status = "reprobe"
    else:
        status = "hit" if not missing else "partial" if cached else "miss"
    if lookup.problem:
        status += f" ({lookup.problem})"
    results.cache_status.append(status)
    if not missing:
        return {name: cached[name] for name in specs}
    began = time.perf_counter()
    fresh = run_probes(identity.key, missing, timeout=options.probe_timeout)
    results.seconds += time.perf_counter() - began
    outcomes = {name: cached[name] if name in cached else fresh[name] for name in specs}
    cache.store(key, outcomes)
    return outcomes
