"""The registry: merge precedence and provenance, snapshots, cache hit/miss/invalidation, profiles."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_devcaps.config import RuleVerdict
from pytest_devcaps.errors import ConfigError, UnknownCapabilityError
from pytest_devcaps.model import Level, ProbeOutcome
from pytest_devcaps.registry import (
    CapabilityRegistrar,
    CapabilityRegistry,
    CapabilitySetting,
    RegistryOptions,
    merge_answer,
)

RAN = ProbeOutcome(Level.NATIVE, "op ran")
REFUSED = ProbeOutcome(Level.UNSUPPORTED, "op raised RuntimeError: no kernel")
UNSURE = ProbeOutcome(Level.UNKNOWN, "probe timed out after 2.0s")


@pytest.mark.parametrize(
    ("outcome", "verdict", "level", "source"),
    [
        (RAN, None, Level.NATIVE, "probe"),
        (RAN, RuleVerdict(Level.NATIVE, "rule native"), Level.NATIVE, "probe"),
        (RAN, RuleVerdict(Level.EMULATED, "upcasts"), Level.EMULATED, "probe"),
        (RAN, RuleVerdict(Level.UNSUPPORTED, "needs sm_89"), Level.EMULATED, "probe"),
        (REFUSED, RuleVerdict(Level.NATIVE, "rule native"), Level.UNSUPPORTED, "probe"),
        (UNSURE, RuleVerdict(Level.NATIVE, "rule native"), Level.NATIVE, "vendor-rule"),
        (UNSURE, None, Level.UNKNOWN, "probe"),
        (None, RuleVerdict(Level.UNSUPPORTED, "declared"), Level.UNSUPPORTED, "vendor-rule"),
        (None, None, Level.UNKNOWN, "default"),
    ],
)
def test_merge_answer(outcome: ProbeOutcome | None, verdict: RuleVerdict | None, level: Level, source: str) -> None:
    record = merge_answer("dtype.fp8_e4m3fn", "acme:0", outcome, verdict)
    assert (record.level, record.source) == (level, source)
    assert record.reason


def test_merge_reasons_keep_probe_and_rule_text() -> None:
    record = merge_answer("dtype.fp8_e4m3fn", "cpu", RAN, RuleVerdict(Level.EMULATED, "CPU upcasts fp8"))
    assert record.reason == "op ran; CPU upcasts fp8"
    record = merge_answer("x.y", "cpu", UNSURE, RuleVerdict(Level.NATIVE, "declared"))
    assert "probe could not tell: probe timed out" in record.reason


def test_capability_setting_parse() -> None:
    assert CapabilitySetting.parse("dtype.bf16=native") == CapabilitySetting("dtype.bf16", Level.NATIVE, None)
    assert CapabilitySetting.parse("dtype.bf16=unsupported@cuda:1").device == "cuda:1"
    with pytest.raises(ConfigError, match="expected CAPABILITY=LEVEL"):
        CapabilitySetting.parse("dtype.bf16")
    with pytest.raises(ConfigError, match="invalid level 'nope'"):
        CapabilitySetting.parse("dtype.bf16=nope")


def _build(tmp_path: Path, **kwargs: object) -> CapabilityRegistry:
    return CapabilityRegistry.build(RegistryOptions(cache_dir=tmp_path / "cache", **kwargs))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def real_registry(tmp_path_factory: pytest.TempPathFactory) -> CapabilityRegistry:
    return CapabilityRegistry.build(RegistryOptions(cache_dir=tmp_path_factory.mktemp("cache")))


def test_cpu_answers_come_from_probes_and_rules(real_registry: CapabilityRegistry) -> None:
    cpu = real_registry.view("cpu")
    assert cpu["dist.gloo"].level is Level.NATIVE and cpu["dist.gloo"].source == "probe"
    assert cpu["dtype.fp8_e4m3fn"].level is Level.EMULATED
    assert cpu["attention.flash"].level is Level.NATIVE
    assert cpu["attention.mem_efficient"].level is Level.UNSUPPORTED
    assert cpu["runtime.graphs"].level is Level.UNSUPPORTED
    assert cpu["dist.nccl"].level is Level.UNSUPPORTED
    assert cpu["dtype.tf32"].level is Level.UNSUPPORTED
    assert set(real_registry.capability_names) >= {"dtype.fp64", "mm.scaled", "compile.inductor", "dist.mpi"}


def test_unknown_capability_lookup_suggests(real_registry: CapabilityRegistry) -> None:
    with pytest.raises(UnknownCapabilityError) as info:
        real_registry.record("attention.flsh", "cpu")
    assert info.value.suggestion == "attention.flash"
    assert "did you mean 'attention.flash'" in str(info.value)


def test_unknown_device_lookup(real_registry: CapabilityRegistry) -> None:
    with pytest.raises(KeyError, match="no device 'cpuu'"):
        real_registry.record("dtype.bf16", "cpuu")


def test_snapshot_round_trip_is_plain_data(real_registry: CapabilityRegistry) -> None:
    import json

    snapshot = real_registry.to_snapshot()
    clone = CapabilityRegistry.from_snapshot(json.loads(json.dumps(snapshot)))
    assert list(clone) == list(real_registry)
    assert clone.devices == real_registry.devices


def test_override_precedence_and_provenance(tmp_path: Path) -> None:
    first = tmp_path / "first.yaml"
    first.write_text("devcaps: 1\noverrides:\n  - match: {type: cpu}\n    set:\n"
                     "      dtype.fp16: unsupported\n      dtype.bf16: {level: unsupported, reason: first}\n")
    second = tmp_path / "second.yaml"
    second.write_text("devcaps: 1\noverrides:\n  - when: \"vendor == 'cpu'\"\n    set:\n"
                      "      dtype.bf16: {level: emulated, reason: second wins}\n")
    registry = _build(tmp_path, overrides=(str(first), str(second)),
                      settings=(CapabilitySetting("dtype.fp16", Level.NATIVE, "cpu"),))
    fp16 = registry.record("dtype.fp16", "cpu")
    assert (fp16.level, fp16.source) == (Level.NATIVE, "cli")
    bf16 = registry.record("dtype.bf16", "cpu")
    assert (bf16.level, bf16.reason, bf16.source) == (Level.EMULATED, "second wins", f"override:{second}")
    assert registry.record("dist.gloo", "cpu").source == "probe"


def test_cli_setting_for_unknown_capability(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="did you mean 'dtype.bf16'"):
        _build(tmp_path, settings=(CapabilitySetting("dtype.bf61", Level.NATIVE),))


class _Hooks:
    """A stand-in for config.hook carrying one extra capability with a counting probe."""

    def __init__(self, description: str = "counted") -> None:
        self.description = description

    def pytest_devcaps_register_capabilities(self, registrar: CapabilityRegistrar) -> None:
        registrar.capability("test.counted", self.description, probe="test.counted")
        registrar.probe("test.counted", counted_probe, isolated=False)

    def pytest_devcaps_register_backends(self, registrar: object) -> None:
        pass

    def pytest_devcaps_adjust_results(self, device: object, records: object) -> list:
        return []


CALLS: list[str] = []


def counted_probe(device: str) -> ProbeOutcome:
    CALLS.append(device)
    return ProbeOutcome(Level.NATIVE, "counted")


def test_cache_hit_miss_and_invalidation(tmp_path: Path) -> None:
    CALLS.clear()
    options = RegistryOptions(cache_dir=tmp_path / "cache")
    cold = CapabilityRegistry.build(options, hook=_Hooks())
    assert cold.meta["cache"] == "miss" and len(CALLS) == 1
    warm = CapabilityRegistry.build(options, hook=_Hooks())
    assert warm.meta["cache"] == "hit" and len(CALLS) == 1
    assert list(warm) == list(cold)
    forced = CapabilityRegistry.build(RegistryOptions(cache_dir=tmp_path / "cache", reprobe=True), hook=_Hooks())
    assert forced.meta["cache"] == "reprobe" and len(CALLS) == 2
    # A changed catalogue (here: a hook's description) changes the fingerprint: a miss.
    changed = CapabilityRegistry.build(options, hook=_Hooks("counted, reworded"))
    assert changed.meta["cache"] == "miss" and len(CALLS) == 3
    # A torn/corrupt cache file is a miss, not a crash.
    for path in (tmp_path / "cache").glob("probes-*.json"):
        path.write_text("{not json")
    assert CapabilityRegistry.build(options, hook=_Hooks()).meta["cache"] == "miss"


H200_EXPECTED = {
    "dtype.fp8_e4m3fn": Level.NATIVE,
    "attention.flash": Level.NATIVE,
    "runtime.graphs": Level.NATIVE,
    "dtype.tf32": Level.NATIVE,
    "dist.nccl": Level.NATIVE,
}


def test_profile_registry_answers_from_rules(tmp_path: Path) -> None:
    registry = _build(tmp_path, profile="nvidia-h200")
    assert registry.meta["profile"] == "nvidia-h200"
    device = registry.devices[0]
    assert (device.type, device.arch, device.count) == ("cuda", "sm_90", 8)
    for capability, level in H200_EXPECTED.items():
        record = registry.record(capability, "cuda")
        assert record.level is level, record
        assert record.source == "vendor-rule"
    # Devices of the same model share answers: cuda:7 exists and equals cuda:0.
    assert registry.record("dtype.bf16", "cuda:7").level is Level.NATIVE
