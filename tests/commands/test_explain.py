"""``devcaps probe --explain CAP``: the rule that fired, the probe, the layers, the final answer, and
for unknown answers what would decide them; on this CPU and on every shipped profile."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_devcaps.commands.main import main
from pytest_devcaps.config import compile_expression, list_profiles
from pytest_devcaps.commands.explain import explain_lines, probe_notes, substitute_facts
from pytest_devcaps.model import Level
from pytest_devcaps.registry import CapabilityRegistry, CapabilitySetting, RegistryOptions, build_registry

RULE_LINE = re.compile(r"capabilities\.yaml:\d+  ")


def _explain_all(registry: CapabilityRegistry, options: RegistryOptions) -> dict[str, list[str]]:
    outcomes, probed = registry.probe_outcomes, registry.probed  # what the build measured
    identity = registry.primary_device
    return {name: explain_lines(registry, name, identity,
                                probe_notes(registry, name, outcomes, probed)[identity.key])
            for name in registry.capability_names}


def _check_block(registry: CapabilityRegistry, name: str, lines: list[str]) -> None:
    record = registry.record(name, registry.primary_device.key)
    text = "\n".join(lines)
    assert lines[0].startswith(f"{name} on {record.device}")
    assert f"final: {record.level.value} (source {record.source})" in text
    assert "probe:" in text
    if record.source == "vendor-rule":  # the rule that fired: where, why, and its source
        assert RULE_LINE.search(text) and "fired:" in text and "source: " in text
        assert "source: not given" not in text
    if record.level is Level.UNKNOWN:
        assert "unknown: what would decide it:" in text
        assert f"--devcaps-set {name}=LEVEL" in text


@pytest.fixture(scope="module")
def cpu_registry(tmp_path_factory: pytest.TempPathFactory) -> tuple[CapabilityRegistry, RegistryOptions]:
    options = RegistryOptions(cache_dir=tmp_path_factory.mktemp("cache"))
    return build_registry(options), options


def test_every_capability_on_this_cpu(cpu_registry: tuple[CapabilityRegistry, RegistryOptions]) -> None:
    registry, options = cpu_registry
    explained = _explain_all(registry, options)
    assert set(explained) == set(registry.capability_names)
    for name, lines in explained.items():
        _check_block(registry, name, lines)
        # probed here: the probe's own line, whatever it found (ran the op, unsupported, or
        # emulated: fp8 on a CPU with AMX-INT8 goes to oneDNN's reference kernel)
        assert any(line.lstrip().startswith("probe: ") for line in lines), name
    # the probe and the rule below it both appear, oldest first
    bf16 = "\n".join(explained["dtype.bf16"])
    assert bf16.index("(vendor-rule:") < bf16.index("(probe:")


@pytest.mark.parametrize("profile", list_profiles())
def test_every_capability_on_every_shipped_profile(profile: str) -> None:
    options = RegistryOptions(profile=profile)
    registry = build_registry(options)
    for name, lines in _explain_all(registry, options).items():
        _check_block(registry, name, lines)
        text = "\n".join(lines)
        assert f"not run: profile {profile}" in text or "probe: none is registered" in text


def test_the_when_is_shown_with_the_facts_put_in(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "--explain", "attention.flash", "--profile", "nvidia-h100"]) == 0
    out = capsys.readouterr().out
    assert "when platform == 'win32'" in out and "'linux' == 'win32'  -> false" in out
    assert "9.0 >= 8.0 and 9.0 <= 12.1  -> true" in out
    assert "fired: native: FlashAttention supports sm_80..sm_121; found sm_90" in out
    assert "source: aten/src/ATen/native/transformers/cuda/sdp_utils.cpp" in out
    assert "not run: profile nvidia-h100" in out


def test_unknown_says_what_decides_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "--explain", "runtime.graphs", "--profile", "habana-gaudi3"]) == 0
    out = capsys.readouterr().out
    assert "final: unknown (source vendor-rule)" in out
    assert "PT_HPU_LAZY_MODE=1" in out  # the rule's reason names the deciding setting
    assert "running the probe registered under runtime.graphs on the device itself" in out


def test_an_alias_says_which_capability_answered(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "--explain", "dtype.fp8", "--profile", "nvidia-a100"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("dtype.fp8 (an alias of mm.scaled) on cuda:0")
    assert "final: unsupported (source vendor-rule)" in out


def test_replacing_layers_are_listed(tmp_path: Path) -> None:
    override = tmp_path / "ov.yaml"
    override.write_text("devcaps: 1\noverrides:\n  - set:\n      dtype.tf32: {level: native, "
                        "reason: our patched stack}\n")
    options = RegistryOptions(profile="nvidia-t4", overrides=(str(override),),
                              settings=(CapabilitySetting("dtype.tf32", Level.UNSUPPORTED),))
    registry = build_registry(options)
    text = "\n".join(_explain_all(registry, options)["dtype.tf32"])
    # the rule fired, the override replaced it, the command line replaced the override
    assert text.index("unsupported (vendor-rule:") < text.index(f"native (override:{override}") \
        < text.index("unsupported (cli: set on the command line)  <- final")
    assert "final: unsupported (source cli)" in text


def test_unknown_from_an_implication_or_a_setting_says_where_to_look() -> None:
    options = RegistryOptions(profile="nvidia-h100",
                              settings=(CapabilitySetting("runtime.events", Level.UNKNOWN),))
    registry = build_registry(options)
    explained = _explain_all(registry, options)
    streams = "\n".join(explained["runtime.streams"])
    assert "final: unknown (source implies)" in streams
    assert "decide runtime.events first (devcaps probe --explain runtime.events)" in streams
    assert "cli set it to unknown: change that setting" in "\n".join(explained["runtime.events"])


def test_missing_facts_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "gpu.yaml"
    profile.write_text("devcaps: 1\nprofile:\n  name: odd\n  devices:\n    - {type: cuda, vendor: amd, "
                       "arch: gfx950}\n")
    assert main(["probe", "--explain", "mm.scaled", "--profile", str(profile)]) == 0
    out = capsys.readouterr().out
    assert "final: unknown (source default)" in out
    assert "does not report rocm_version" in out
    assert "with this device's facts: 'gfx950' == 'gfx942' or ('gfx950' in" in out
    assert "missing >= '6.5'" in out


def test_unknown_capability_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "--explain", "attention.flsh", "--profile", "nvidia-h100"]) == 2
    assert "did you mean 'attention.flash'?" in capsys.readouterr().err


@pytest.mark.parametrize(("text", "facts", "shown"), [
    ("compute_capability >= 8.0", {"compute_capability": 9.0}, "9.0 >= 8.0"),
    ("arch in ['gfx942', 'arch']", {"arch": "gfx942"}, "'gfx942' in ['gfx942', 'arch']"),
    ("'avx2' in isa and platform != 'darwin'", {"isa": ["avx2", "neon"]},
     "'avx2' in ['avx2', 'neon'] and missing != 'darwin'"),
    ("cudnn_version == None", {"cudnn_version": None}, "none == None"),
])
def test_substitute_facts_leaves_string_literals_alone(text: str, facts: dict[str, object],
                                                       shown: str) -> None:
    assert substitute_facts(compile_expression(text), facts) == shown


def test_a_short_name_resolves_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "--explain", "bf16"]) == 0
    captured = capsys.readouterr()
    assert "'bf16' taken as 'dtype.bf16' (did you mean 'dtype.bf16'?)" in captured.err
    assert captured.out.startswith("dtype.bf16 on ")


def test_a_name_matching_nothing_is_still_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "--explain", "zz9"]) == 2
    assert "unknown capability 'zz9'" in capsys.readouterr().err


def test_an_ambiguous_short_name_lists_the_candidates() -> None:
    from pytest_devcaps.commands.explain import resolve_short_name
    from pytest_devcaps.config import load_catalogue
    from pytest_devcaps.errors import DevcapsError, UnknownCapabilityError

    catalogue = load_catalogue()
    assert resolve_short_name(catalogue, "dtype.bf16") == "dtype.bf16"

    class TwoFlashes:  # a catalogue where one short name ends two capabilities
        capabilities = {"attention.flash": None, "vendor.flash": None}

        def aliases(self) -> dict[str, str]:
            return {}

        def check_name(self, name: str) -> str:
            if name not in self.capabilities:
                raise UnknownCapabilityError(name, list(self.capabilities))
            return name

    with pytest.raises(DevcapsError, match="'flash': it is the last part of 'attention.flash', "
                                           "'vendor.flash'; name one"):
        resolve_short_name(TwoFlashes(), "flash")
