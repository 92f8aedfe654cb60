"""What build_registry refuses before answering: a --devcaps-set device that is not here, and
fact names no backend (builtin or hook-registered) declares."""

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
    ("cuda:3", "dtype.bf16=unsupported@cuda:3: no device 'cuda:3' here; devices: cpu (a device "
               "type such as 'cuda' sets every device of that type)"),
    ("cpu:0", "dtype.bf16=unsupported@cpu:0: no device 'cpu:0' here (did you mean 'cpu'?)"),
])
def test_a_cli_setting_for_an_absent_device_is_an_error(tmp_path: Path, device: str,
                                                        words: str) -> None:
    """Found before probing: it costs no probe run."""
    options = RegistryOptions(cache_dir=tmp_path, settings=_set(device))
    with pytest.raises(ConfigError, match=re.escape(f"command line: dtype.bf16: {words}")):
        build_registry(options)
    assert not list(tmp_path.iterdir())


def test_cli_settings_on_a_profile_name_its_devices(tmp_path: Path) -> None:
    def build(device: str) -> object:
        return build_registry(RegistryOptions(profile="nvidia-h200", settings=_set(device)))

    for device in ("cuda", "cuda:0"):
        assert build(device).record("dtype.bf16", "cuda:0").source == "cli"  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=re.escape(
            "@xpu: no device 'xpu' here; devices: cuda:0")):
        build("xpu")
    with pytest.raises(ConfigError, match=re.escape(
            "@cuda:7: cuda:7 shares the answers of cuda:0 (one description of 8 identical devices); "
            "set it with @cuda")):
        build("cuda:7")
    with pytest.raises(ConfigError, match=re.escape("@cuda:8: no device 'cuda:8' here")):
        build("cuda:8")


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
