"""Text and JSON views of a capability registry.

Shared by ``devcaps probe`` (``commands/probe.py``), ``devcaps check`` and the pytest header
(``reporting``). Imports
neither pytest nor torch: ``devcaps probe`` must not pay for importing pytest.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from pytest_devcaps.errors import ConfigError, did_you_mean
from pytest_devcaps.model import CapabilityRecord, DeviceIdentity, Level

if TYPE_CHECKING:
    from pytest_devcaps.registry import CapabilityRegistry


def describe_identity(identity: DeviceIdentity) -> str:
    parts = [f"{identity.key}: {identity.name}", f"vendor={identity.vendor}", f"arch={identity.arch}"]
    if identity.memory_bytes:
        parts.append(f"memory={identity.memory_bytes / 2**30:.1f}GiB")
    if identity.count != 1:
        parts.append(f"count={identity.count}")
    if identity.runtime_version:
        parts.append(f"runtime={identity.runtime_version}")
    if identity.driver_version:
        parts.append(f"driver={identity.driver_version}")
    return ", ".join(parts)


def describe_origin(meta: Mapping[str, Any]) -> str:
    """Where the answers came from: ``profile <name>`` or ``probe cache <hit|miss>, probed in Ns``."""
    if meta.get("profile"):
        return f"profile {meta['profile']}"
    return f"probe cache {meta.get('cache', '?')}, probed in {meta.get('probe_seconds', 0)}s"


def build_note(registry: CapabilityRegistry) -> str:
    """``; torch 2.14.1+cu130: CUDA build, no device`` for a registry of this machine's devices
    (:func:`pytest_devcaps.backends.describe_build`); "" for a profile's."""
    if registry.meta.get("profile"):
        return ""
    from pytest_devcaps.backends import describe_build

    described = describe_build(registry.devices)
    return f"; {described}" if described else ""


def compact_levels(records: Sequence[CapabilityRecord]) -> str:
    """``native 14 (dtype.fp64 ...), emulated 5 (...), unsupported 9, unknown 0``."""
    grouped: dict[Level, list[str]] = {level: [] for level in Level}
    for record in records:
        grouped[record.level].append(record.capability)
    parts = []
    for level in Level:
        names = grouped[level]
        if level in (Level.NATIVE, Level.EMULATED) and names:
            parts.append(f"{level.value} {len(names)} ({' '.join(names)})")
        else:
            parts.append(f"{level.value} {len(names)}")
    return "; ".join(parts)


def capability_table(records: Sequence[CapabilityRecord]) -> list[str]:
    """One line per capability: name, level, source and reason."""
    width = max((len(r.capability) for r in records), default=10)
    return [f"  {r.capability:<{width}}  {r.level.value:<11} {r.source}: {r.reason}" for r in records]


def capability_matrix(registry: CapabilityRegistry, devices: Sequence[DeviceIdentity]) -> list[str]:
    """Capabilities down, devices across; each cell ``level/source`` (reasons: the per-device table)."""
    names = registry.capability_names
    cells = {(name, d.key): registry.record(name, d.key) for name in names for d in devices}
    width = max(len(n) for n in names)
    col = {d.key: max([len(d.key)] + [len(f"{cells[n, d.key].level.value}/{cells[n, d.key].source}")
                                      for n in names]) for d in devices}
    lines = ["  " + " " * width + "  " + "  ".join(f"{d.key:<{col[d.key]}}" for d in devices)]
    for name in names:
        row = "  ".join(f"{cells[name, d.key].level.value + '/' + cells[name, d.key].source:<{col[d.key]}}"
                        for d in devices)
        lines.append(f"  {name:<{width}}  {row}".rstrip())
    return lines


def registry_lines(registry: CapabilityRegistry, devices: Sequence[DeviceIdentity], *,
                   verbose: bool = False) -> list[str]:
    """What ``devcaps probe`` prints: the devices, then one table for a single device, or a
    capability x device matrix for several (``verbose`` adds each device's table of reasons)."""
    origin = describe_origin(registry.meta)
    if not registry.meta.get("profile"):
        origin += f", built in {registry.meta.get('build_seconds')}s"
    lines = [f"devcaps: {len(devices)} device(s); {origin}{build_note(registry)}"]
    lines += [describe_identity(identity) for identity in devices]
    if len(devices) > 1:  # capability x device, level/source in each cell
        lines += capability_matrix(registry, devices)
    if len(devices) == 1 or verbose:  # level, source and reason per capability
        for identity in devices:
            if len(devices) > 1:
                lines += ["", f"{identity.key}:"]
            lines += capability_table(registry.records(identity.key))
    return lines


def registry_json(registry: CapabilityRegistry, devices: Sequence[DeviceIdentity]) -> str:
    """Every record of ``devices`` as JSON (a ``probe`` report: ``report.formats``), with the
    device identities and the registry's meta."""
    from pytest_devcaps.report.formats import stamp

    payload = {
        **stamp("probe"),
        "devices": [i.to_dict() for i in devices],
        "capabilities": [r.to_dict() for i in devices for r in registry.records(i.key)],
        "meta": registry.meta,
    }
    return json.dumps(payload, indent=1, sort_keys=True, default=str)


def select_identities(registry: CapabilityRegistry, wanted: Sequence[str]) -> list[DeviceIdentity]:
    """The devices named by key (``cuda:1``) or type (``cuda``); all of them when none is named."""
    if not wanted:
        return list(registry.devices)
    found = [i for i in registry.devices if i.key in wanted or i.type in wanted]
    if not found:
        names = [n for i in registry.devices for n in (i.key, i.type)]
        raise ConfigError(f"no device matches {', '.join(wanted)}{did_you_mean(wanted[0], names)}; "
                          f"devices: {', '.join(i.key for i in registry.devices)}", file="--device")
    return found
