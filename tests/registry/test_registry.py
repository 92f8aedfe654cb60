"""The registry: merge precedence and provenance, snapshots, cache hit/miss/invalidation, profiles."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_devcaps.config import CapabilitySpec, RuleVerdict, list_profiles
from pytest_devcaps.errors import ConfigError, DevcapsWarning, UnknownCapabilityError, UnknownDeviceError
from pytest_devcaps.model import CapabilityRecord, Level, ProbeOutcome
from pytest_devcaps.registry import (
    CapabilityRegistrar,
    CapabilityRegistry,
    CapabilitySetting,
    RegistryOptions,
    build_registry,
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
    assert CapabilitySetting.parse("dtype.bf16=unsupported@cuda:1").device == "cuda:1"  # devcaps: allow[DC003]
    with pytest.raises(ConfigError, match="expected CAPABILITY=LEVEL"):
        CapabilitySetting.parse("dtype.bf16")
    with pytest.raises(ConfigError, match="invalid level 'nope'"):
        CapabilitySetting.parse("dtype.bf16=nope")


def _build(tmp_path: Path, **kwargs: object) -> CapabilityRegistry:
    return build_registry(RegistryOptions(cache_dir=tmp_path / "cache", **kwargs))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def real_registry(tmp_path_factory: pytest.TempPathFactory) -> CapabilityRegistry:
    return build_registry(RegistryOptions(cache_dir=tmp_path_factory.mktemp("cache")))


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
    with pytest.raises(UnknownDeviceError, match="no device 'cpuu'.*did you mean 'cpu'"):
        real_registry.record("dtype.bf16", "cpuu")


def test_snapshot_round_trip_is_plain_data(real_registry: CapabilityRegistry) -> None:
    import json

    snapshot = real_registry.to_snapshot()
    clone = CapabilityRegistry.from_snapshot(json.loads(json.dumps(snapshot)), real_registry.catalogue)
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
        registrar.capability("test.counted", self.description)
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
    cold = build_registry(options, hook=_Hooks())
    assert cold.meta["cache"] == "miss" and len(CALLS) == 1
    warm = build_registry(options, hook=_Hooks())
    assert warm.meta["cache"] == "hit" and len(CALLS) == 1
    assert list(warm) == list(cold)
    forced = build_registry(RegistryOptions(cache_dir=tmp_path / "cache", reprobe=True), hook=_Hooks())
    assert forced.meta["cache"] == "reprobe" and len(CALLS) == 2
    # A changed catalogue (here: a hook's description) changes the fingerprint: a miss.
    changed = build_registry(options, hook=_Hooks("counted, reworded"))
    assert changed.meta["cache"] == "miss" and len(CALLS) == 3
    # A torn/corrupt cache file is a miss that says so (in the report header), not a crash.
    for path in (tmp_path / "cache").glob("probes-*.json"):
        path.write_text("{not json")
    assert re.fullmatch(r"miss \(probes-\w+\.json is not JSON\)",
                        build_registry(options, hook=_Hooks()).meta["cache"])


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


# --- layers: precedence, provenance, implications ----------------------------------------------

def test_layers_merge_in_order_and_keep_what_they_replaced(tmp_path: Path) -> None:
    override = tmp_path / "ov.yaml"
    override.write_text("devcaps: 1\noverrides:\n  - set:\n      dtype.bf16: {level: emulated, reason: slow bf16}\n")
    registry = _build(tmp_path, overrides=(str(override),),
                      settings=(CapabilitySetting("dtype.bf16", Level.UNSUPPORTED),))
    record = registry.record("dtype.bf16", "cpu")
    assert (record.level, record.source) == (Level.UNSUPPORTED, "cli")
    # Oldest first: whatever the probe (and the rule below it) said, then the override file.
    assert record.history[-1] == f"emulated (override:{override}: slow bf16)"
    assert record.history[0].split(" (")[1].startswith(("probe:", "vendor-rule:"))
    # A record no layer above the rules touched carries only what it replaced, if anything.
    untouched = registry.record("dtype.tf32", "cpu")
    assert all("cli" not in entry for entry in untouched.history)


def test_implies_is_enforced_as_the_last_layer(tmp_path: Path) -> None:
    # The catalogue says fp8 needs bf16; forcing bf16 off takes the fp8 answers with it, naming why.
    registry = _build(tmp_path, settings=(CapabilitySetting("dtype.bf16", Level.UNSUPPORTED, "cpu"),))
    base = _build(tmp_path)
    assert base.record("dtype.fp8_e4m3fn", "cpu").available  # emulated on this CPU
    fp8 = registry.record("dtype.fp8_e4m3fn", "cpu")
    assert (fp8.level, fp8.source) == (Level.UNSUPPORTED, "implies")
    assert fp8.reason == ("needs dtype.bf16, which is unsupported (cli: set on the command line); "
                          "overrules emulated from probe")
    assert fp8.needs == "dtype.bf16"
    assert fp8.history[-1] == base.record("dtype.fp8_e4m3fn", "cpu").describe()
    # What does not imply bf16 keeps its answer.
    assert registry.record("dist.gloo", "cpu") == base.record("dist.gloo", "cpu")


def test_implies_is_transitive_and_unknown_propagates_as_unknown(tmp_path: Path) -> None:
    # graphs -> streams -> events: forcing events unknown makes streams and graphs unknown, even
    # when something above the probes claimed them.
    settings = (CapabilitySetting("runtime.events", Level.UNKNOWN, "cpu"),
                CapabilitySetting("runtime.streams", Level.NATIVE, "cpu"),
                CapabilitySetting("runtime.graphs", Level.NATIVE, "cpu"))
    with pytest.warns(DevcapsWarning) as warned:  # an explicit setting overruled says so
        registry = _build(tmp_path, settings=settings)
        streams = registry.record("runtime.streams", "cpu")
        graphs = registry.record("runtime.graphs", "cpu")
    assert sorted(str(w.message).split(" on cpu")[0] for w in warned) == [
        "pytest-devcaps: cli sets runtime.graphs=native", "pytest-devcaps: cli sets runtime.streams=native"]
    assert (streams.level, streams.source) == (Level.UNKNOWN, "implies")
    assert streams.reason.startswith("needs runtime.events, which is unknown (cli:")
    assert (graphs.level, graphs.source) == (Level.UNKNOWN, "implies")
    assert graphs.reason.startswith("needs runtime.streams, which is unknown (implies:")


@pytest.mark.parametrize("profile", list_profiles())  # every shipped profile, as it is added
def test_shipped_rules_never_violate_an_implication(tmp_path: Path, profile: str) -> None:
    """The implication layer is a guard, not a crutch: no shipped profile needs it."""
    registry = _build(tmp_path, profile=profile)
    enforced = [r for r in registry if r.source == "implies"]
    assert not enforced, [f"{r.capability} on {r.device}: {r.reason}" for r in enforced]


class _BadAdjustHooks(_Hooks):
    def __init__(self, record: object) -> None:
        super().__init__()
        self.record = record

    def pytest_devcaps_adjust_results(self, device: object, records: object) -> list:
        return [[self.record]]


@pytest.mark.parametrize(("record", "words"), [
    ("dtype.bf16=native", "returned str, expected CapabilityRecord"),
    (CapabilityRecord("dtype.bf61", "cpu", Level.NATIVE, "r", "hook:x"),
     "unknown capability 'dtype.bf61' (did you mean 'dtype.bf16'?)"),
    (CapabilityRecord("dtype.bf16", "cuda:0", Level.NATIVE, "r", "hook:x"),
     "record for device 'cuda:0' while adjusting 'cpu'"),
])
def test_adjust_results_hook_returns_are_checked(tmp_path: Path, record: object, words: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(words)):
        build_registry(RegistryOptions(cache_dir=tmp_path / "cache"), hook=_BadAdjustHooks(record))


def test_adjust_results_hook_wins_over_the_command_line(tmp_path: Path) -> None:
    replacement = CapabilityRecord("dtype.bf16", "cpu", Level.EMULATED, "vendor says slow", "hook:acme")
    options = RegistryOptions(cache_dir=tmp_path / "cache",
                              settings=(CapabilitySetting("dtype.bf16", Level.UNSUPPORTED),))
    record = build_registry(options, hook=_BadAdjustHooks(replacement)).record("dtype.bf16", "cpu")
    # a stand-in relay is one plugin, named by its type (a pluggy relay names each plugin)
    assert (record.level, record.source) == (Level.EMULATED, "hook:_BadAdjustHooks")
    assert record.history[-1] == "unsupported (cli: set on the command line)"


class _ProbeTypoHooks(_Hooks):
    def pytest_devcaps_register_capabilities(self, registrar: CapabilityRegistrar) -> None:
        registrar.probe("dtype.bf61", counted_probe)


def test_probe_for_an_undeclared_capability_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=re.escape("unknown capability 'dtype.bf61' (did you mean 'dtype.bf16'?)")):
        build_registry(RegistryOptions(cache_dir=tmp_path / "cache"), hook=_ProbeTypoHooks())


def test_device_has_names_an_unknown_device(real_registry: CapabilityRegistry) -> None:
    from pytest_devcaps import library

    library.install_default_registry(real_registry)
    try:
        assert library.device_has("cpu", "dist.gloo") is True
        with pytest.raises(UnknownDeviceError, match="no device 'xpu:0'"):
            library.device_has("xpu:0", "dist.gloo")
        with pytest.raises(UnknownCapabilityError):
            library.device_has("cpu", "dist.glo")
    finally:
        library.uninstall_default_registry(real_registry)


def test_a_device_index_past_the_count_is_unknown(tmp_path: Path) -> None:
    registry = _build(tmp_path, profile="nvidia-h200")  # 8 GPUs
    assert registry.identity("cuda:7").key == "cuda:7"
    with pytest.raises(UnknownDeviceError, match="no device 'cuda:8'"):
        registry.record("dtype.bf16", "cuda:8")


def test_snapshot_from_another_catalogue_is_refused(real_registry: CapabilityRegistry) -> None:
    extended = real_registry.catalogue.with_capabilities(
        [CapabilitySpec("test.extra", "only in this process")])
    with pytest.raises(ValueError, match="another catalogue"):
        CapabilityRegistry.from_snapshot(real_registry.to_snapshot(), extended)
