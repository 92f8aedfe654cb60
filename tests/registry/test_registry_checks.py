"""What build_registry refuses before answering: a --devcaps-set device that is not here (before
any probe runs), and fact names no backend (builtin or hook-registered) declares."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Mapping

import pytest

from pytest_devcaps.errors import ConfigError
from pytest_devcaps.model import DeviceIdentity, Fact, Level
from pytest_devcaps.registry import (
    BackendRegistrar,
    CapabilityRegistrar,
    CapabilitySetting,
    RegistryOptions,
    build_registry,
)


def _set(device: str) -> tuple[CapabilitySetting, ...]:
    return (CapabilitySetting("dtype.bf16", Level.UNSUPPORTED, device),)


@pytest.mark.parametrize(("device", "words"), [
    ("cuda:3", "dtype.bf16@cuda:3: no device here matches 'cuda:3'; devices: cpu"),
    ("cpu:0", "dtype.bf16@cpu:0: no device here matches 'cpu:0' (did you mean 'cpu'?)"),
])
def test_a_cli_setting_for_an_absent_device_is_refused_before_probing(
        tmp_path: Path, device: str, words: str) -> None:
    """The check (registry/options.py) runs once the devices are known, before any probe."""
    options = RegistryOptions(cache_dir=tmp_path, settings=_set(device))
    with pytest.raises(ConfigError, match=re.escape(f"command line: {words}")):
        build_registry(options)
    assert not list(tmp_path.iterdir())  # no probe ran, nothing was cached


def test_cli_settings_on_a_profile_name_its_devices() -> None:
    def build(device: str) -> object:
        return build_registry(RegistryOptions(profile="nvidia-h200", settings=_set(device)))

    for device in ("cuda", "cuda:0"):
        assert build(device).record("dtype.bf16", "cuda:0").source == "cli"  # type: ignore[attr-defined]
    for device in ("xpu", "cuda:8"):
        with pytest.raises(ConfigError, match=re.escape(
                f"dtype.bf16@{device}: no device here matches {device!r}")):
            build(device)


class _AcmeAdapter:
    type = "acme"
    visible_devices_variable = None
    facts: Mapping[str, Fact] = {"acme_gen": Fact("Acme chip generation")}

    def is_available(self) -> bool:
        return False

    def discover(self) -> list[DeviceIdentity]:
        return []


class _AcmeHooks:
    """A vendor plugin: a backend that declares ``acme_gen`` and a rule that uses it."""

    def pytest_devcaps_register_backends(self, registrar: BackendRegistrar) -> None:
        registrar.add(_AcmeAdapter())

    def pytest_devcaps_register_capabilities(self, registrar: CapabilityRegistrar) -> None:
        registrar.rule("acme", "dtype.bf16", "native", "gen 2 has bf16", when="acme_gen >= 2")

    def pytest_devcaps_adjust_results(self, device: object, records: object) -> list[object]:
        return []


def test_facts_a_hook_backend_declares_may_be_used_and_others_may_not(tmp_path: Path) -> None:
    overrides = tmp_path / "acme.yaml"
    overrides.write_text("devcaps: 1\noverrides:\n  - match: {acme_gen: 2}\n"
                         "    set: {dtype.fp16: native}\n")
    options = RegistryOptions(profile="nvidia-h200", overrides=(str(overrides),))
    registry = build_registry(options, hook=_AcmeHooks())
    assert registry.record("dtype.fp16", "cuda:0").source == "vendor-rule"  # acme only
    with pytest.raises(ConfigError, match=re.escape(
            f"{overrides}:3: overrides[0].match.acme_gen: unknown device fact 'acme_gen'")):
        build_registry(options)


def test_a_registry_of_many_devices_is_read_in_linear_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every record of every device, by device key: a profile of 100,000 devices took over
    150 s because each lookup scanned the devices (quadratic). Counted in key computations, not
    timed: doubling the devices doubles the work."""
    from pytest_devcaps.config import load_catalogue
    from pytest_devcaps.model import CapabilityRecord, DeviceIdentity, Level
    from pytest_devcaps.registry import CapabilityRegistry

    catalogue = load_catalogue()
    names = catalogue.names()
    computed = [0]
    key = DeviceIdentity.key

    def counted(self: DeviceIdentity) -> str:
        computed[0] += 1
        return key.fget(self)  # type: ignore[attr-defined, no-any-return]

    def work(devices: int) -> int:
        identities = [DeviceIdentity(type="cuda", index=i, vendor="nvidia", name="H100",
                                     arch="sm_90", memory_bytes=None, count=devices,
                                     torch_version="") for i in range(devices)]
        records = {d.key: {n: CapabilityRecord(n, d.key, Level.NATIVE, "r", "profile:x")
                           for n in names} for d in identities}
        registry = CapabilityRegistry(identities, records, catalogue)
        computed[0] = 0
        monkeypatch.setattr(DeviceIdentity, "key", property(counted))
        try:
            assert len(list(registry)) == devices * len(names)
            registry.identity(f"{identities[-1].type}:{devices - 1}")
        finally:
            monkeypatch.setattr(DeviceIdentity, "key", key)
        return computed[0]

    small, large = work(100), work(200)
    assert large <= 2.2 * small, (small, large)
