"""Device profiles: described hardware, so selection and reports can run without the device.

Schema::

    devcaps: 1
    profile:
      name: nvidia-h100
      description: NVIDIA H100 SXM 80GB
      devices:
        - {type: cuda, vendor: nvidia, name: "NVIDIA H100 80GB HBM3", arch: sm_90,
           memory_gib: 80, count: 8,
           facts: {compute_capability: 9.0, sm: 90, cuda_version: "12.8"}}
      fixed: {}        # optional: capability -> level or {level, reason}

Device keys: ``type`` and ``arch`` (required), ``vendor`` (default: the type), ``name``
(default: the type), ``index`` (default: None for cpu, else 0), ``memory_gib`` or
``memory_bytes``, ``count`` (default 1), ``torch_version``, ``runtime_version``,
``driver_version`` and ``facts`` (fact name -> scalar or list of scalars).

``facts:`` names must be device facts a backend declares (:mod:`pytest_devcaps.config.facts`); any
other name is an error naming the closest one. Versions (the ``*_version`` fields and version
facts such as ``cuda_version``) are quoted strings: YAML reads an unquoted 12.10 as the
number 12.1, so a decimal there is refused; a whole number (``torch_version: 3``) is accepted.
"""

from __future__ import annotations

import importlib.resources
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from pytest_devcaps.config.catalogue import Catalogue, RuleVerdict, capability_key, parse_verdict
from pytest_devcaps.config.yamlsource import (
    FrozenMap,
    Where,
    check_document,
    check_fact_name,
    check_identifier,
    check_keys,
    expect_int,
    expect_list,
    expect_mapping,
    expect_number,
    expect_scalars,
    expect_str,
    items,
    line_of,
    no_cyclic_gc,
    check_version_values,
    read_yaml_file,
)
from pytest_devcaps.errors import ConfigError, did_you_mean
from pytest_devcaps.model import IDENTITY_FACTS, DeviceIdentity

if TYPE_CHECKING:
    from pytest_devcaps.config.facts import FactVocabulary

_PROFILE_KEYS = {"name", "description", "devices", "fixed"}
_DEVICE_KEYS = {"type", "index", "vendor", "name", "arch", "memory_gib", "memory_bytes", "count",
                "torch_version", "runtime_version", "driver_version", "facts"}
# The most memory a profile device may claim: 16 EiB (2**64 bytes).
_MAX_MEMORY_BYTES = 2**64


@dataclass(frozen=True)
class DeviceProfile:
    """A described machine: its devices and any answers fixed regardless of vendor rules."""

    name: str
    description: str
    identities: tuple[DeviceIdentity, ...]
    fixed: Mapping[str, RuleVerdict]
    source: str


def _profiles_dir() -> Path:
    return Path(str(importlib.resources.files("pytest_devcaps").joinpath("profiles")))


def list_profiles() -> list[str]:
    """Names of the shipped profiles (``nvidia-h100``, ``amd-mi300x``, ...), sorted."""
    directory = _profiles_dir()
    if not directory.is_dir():
        return []
    return sorted(path.stem for path in directory.glob("*.yaml"))


def _optional_version(device: Mapping[str, Any], key: str, where: Where,
                      facts: FactVocabulary) -> str | None:
    if device.get(key) is None:
        return None
    value = device[key]
    check_version_values(key, [value], where.child(device, key), facts)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)  # `torch_version: 3` loses nothing
    return expect_str(value, where.child(device, key))


def _parse_facts(value: Any, where: Where, vocabulary: FactVocabulary) -> dict[str, Any]:
    expect_mapping(value, where)
    facts: dict[str, Any] = {}
    for name, fact, fact_where in items(value, where):
        check_identifier(name, fact_where)
        if name in IDENTITY_FACTS:
            raise fact_where.error(f"{name!r} is a device field; set it next to 'type', "
                                   "not under 'facts'")
        check_fact_name(name, fact_where, vocabulary)
        values = expect_scalars(fact, fact_where)
        check_version_values(name, values, fact_where, vocabulary)
        facts[name] = values if isinstance(fact, list) else fact
    return facts


def _memory_bytes(device: Mapping[str, Any], where: Where) -> int | None:
    if "memory_gib" in device and "memory_bytes" in device:
        raise where.child(device, "memory_bytes").error(
            "give either 'memory_gib' or 'memory_bytes', not both")
    if device.get("memory_bytes") is not None:
        key = "memory_bytes"
        memory = expect_int(device[key], where.child(device, key), minimum=0)
    elif device.get("memory_gib") is not None:
        key = "memory_gib"
        gib = expect_number(device[key], where.child(device, key))
        if gib < 0:
            raise where.child(device, key).error("must not be negative")
        memory = int(min(gib, _MAX_MEMORY_BYTES) * 2**30)
    else:
        return None
    if memory > _MAX_MEMORY_BYTES:
        raise where.child(device, key).error("more than 16 EiB of device memory")
    return memory


def _parse_device(device: Any, where: Where, vocabulary: FactVocabulary) -> DeviceIdentity:
    expect_mapping(device, where)
    check_keys(device, where, allowed=_DEVICE_KEYS, required={"type", "arch"})
    device_type = check_identifier(device["type"], where.child(device, "type"), "device type")
    if device_type != device_type.lower():
        raise where.child(device, "type").error("device types are lower case, e.g. 'cuda'")
    vendor = expect_str(device.get("vendor", device_type), where.child(device, "vendor")).lower()
    name = expect_str(device.get("name", device_type), where.child(device, "name"))
    arch = expect_str(device["arch"], where.child(device, "arch"))
    index: int | None = None if device_type == "cpu" else 0
    if "index" in device:
        index = None if device["index"] is None else expect_int(
            device["index"], where.child(device, "index"), minimum=0)
    memory_bytes = _memory_bytes(device, where)
    count = 1
    if "count" in device:
        count = expect_int(device["count"], where.child(device, "count"), minimum=1)
    facts: dict[str, Any] = {}
    if device.get("facts") is not None:
        facts = _parse_facts(device["facts"], where.child(device, "facts"), vocabulary)
    return DeviceIdentity(
        type=device_type, index=index, vendor=vendor, name=name, arch=arch,
        memory_bytes=memory_bytes, count=count,
        torch_version=_optional_version(device, "torch_version", where, vocabulary) or "",
        runtime_version=_optional_version(device, "runtime_version", where, vocabulary),
        driver_version=_optional_version(device, "driver_version", where, vocabulary),
        facts=facts,
    )


def parse_profile(document: Any, source: str, catalogue: Catalogue,
                  facts: FactVocabulary | None = None) -> DeviceProfile:
    """Validate one parsed profile document; ``facts`` defaults to the builtin vocabulary."""
    from pytest_devcaps.config.facts import builtin_vocabulary

    vocabulary = builtin_vocabulary() if facts is None else facts
    check_document(document, source, body_keys={"profile"}, required={"profile"})
    where = Where(source, line_of(document), "").child(document, "profile")
    body = expect_mapping(document["profile"], where)
    check_keys(body, where, allowed=_PROFILE_KEYS, required={"name", "devices"})
    name = expect_str(body["name"], where.child(body, "name")).strip()
    description = ""
    if body.get("description") is not None:
        description = expect_str(body["description"], where.child(body, "description")).strip()
    devices_where = where.child(body, "devices")
    devices = expect_list(body["devices"], devices_where)
    if not devices:
        raise devices_where.error("expected at least one device")
    identities = tuple(_parse_device(device, devices_where.child(devices, index), vocabulary)
                       for index, device in enumerate(devices))
    fixed: dict[str, RuleVerdict] = {}
    if body.get("fixed") is not None:
        fixed_where = where.child(body, "fixed")
        for capability, value, cap_where in items(expect_mapping(body["fixed"], fixed_where),
                                                  fixed_where):
            capability_key(capability, cap_where, catalogue.capabilities)
            fixed[capability] = parse_verdict(value, cap_where, f"fixed by profile {name}")
    return DeviceProfile(name=name, description=description, identities=identities,
                         fixed=FrozenMap(fixed), source=source)


def _looks_like_path(text: str) -> bool:
    return text.endswith((".yaml", ".yml")) or "/" in text or "\\" in text


def load_profile(name_or_path: str | Path, catalogue: Catalogue,
                 facts: FactVocabulary | None = None) -> DeviceProfile:
    """Load a shipped profile by name (``nvidia-h100``) or any profile file by path; its
    ``facts:`` must be facts of ``facts`` (default: the builtin backends' vocabulary)."""
    if isinstance(name_or_path, Path) or _looks_like_path(str(name_or_path)) or Path(
            str(name_or_path)).is_file():
        path = Path(name_or_path)
    else:
        shipped = list_profiles()
        if name_or_path not in shipped:
            raise ConfigError(
                f"unknown device profile {name_or_path!r}{did_you_mean(name_or_path, shipped)}; "
                f"shipped profiles: {', '.join(shipped)} (or give a path to a .yaml file)",
                key="profile")
        path = _profiles_dir() / f"{name_or_path}.yaml"
    document, source, _ = read_yaml_file(path)
    with no_cyclic_gc():  # linear in the devices: see no_cyclic_gc
        return parse_profile(document, source, catalogue, facts)
