"""PyTorch's capability names as aliases: markers and lookups accept them and say which of our
capabilities answered; bad aliases are refused where they are declared."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_devcaps.config import CapabilitySpec, Catalogue, load_catalogue
from pytest_devcaps.config.catalogue import parse_catalogue
from pytest_devcaps.config.yamlsource import parse_yaml
from pytest_devcaps.errors import ConfigError, UnknownCapabilityError
from pytest_devcaps.registry import RegistryOptions, build_registry

# Upstream PyTorch's Capability.<category>.<name> (PR #190846: dtype.fp8, dtype.bf16,
# attention.flash_attention, attention.mem_efficient_attention; lib.triton from its draft;
# attention.flex_attention from #194039). torch 2.13 has no capability API of its own.
PYTORCH_NAMES = {
    "dtype.fp8": "mm.scaled",  # PLATFORM_SUPPORTS_FP8: torch._scaled_mm runs (CPU, XPU, sm_89+, MI300+)
    "attention.flash_attention": "attention.flash",  # PLATFORM_SUPPORTS_FLASH_ATTENTION
    "attention.mem_efficient_attention": "attention.mem_efficient",  # PLATFORM_SUPPORTS_MEM_EFF_ATTENTION
    "attention.flex_attention": "attention.flex",
    "lib.triton": "compile.triton",  # torch.utils._triton.has_triton()
}


@pytest.fixture(scope="module")
def catalogue() -> Catalogue:
    return load_catalogue()


def test_pytorch_names_resolve_to_ours(catalogue: Catalogue) -> None:
    assert dict(catalogue.aliases()) == PYTORCH_NAMES
    for alias, name in PYTORCH_NAMES.items():
        assert catalogue.check_name(alias).name == name
        assert alias not in catalogue  # aliases are not capabilities of their own
    assert catalogue.check_name("dtype.bf16").name == "dtype.bf16"  # PyTorch's and ours agree


def test_a_misspelt_alias_suggests_the_alias(catalogue: Catalogue) -> None:
    with pytest.raises(UnknownCapabilityError) as info:
        catalogue.check_name("attention.flash_atention")
    assert info.value.suggestion == "attention.flash_attention"


def test_registry_lookups_answer_with_the_real_capability() -> None:
    registry = build_registry(RegistryOptions(profile="nvidia-a100"))
    record = registry.record("dtype.fp8", "cuda:0")
    assert record.capability == "mm.scaled" and record == registry.record("mm.scaled", "cuda:0")
    view = registry.view("cuda")
    assert view.has("attention.flash_attention") and not view.has("dtype.fp8")
    assert registry.check_name("lib.triton") == "compile.triton"


@pytest.mark.parametrize(("yaml_body", "words"), [
    ("  a.b: {description: d, aliases: [a.c]}\n  a.c: {description: d}\n",
     "alias 'a.c' is the name of a declared capability"),
    ("  a.b: {description: d, aliases: [x.y]}\n  a.c: {description: d, aliases: x.y}\n",
     "alias 'x.y' already resolves to 'a.b'"),
    ("  a.b: {description: d, aliases: [NotAName]}\n", "invalid capability name 'NotAName'"),
])
def test_bad_aliases_are_refused_with_file_and_line(yaml_body: str, words: str) -> None:
    text = "devcaps: 1\ncapabilities:\n" + yaml_body
    with pytest.raises(ConfigError, match=words) as info:
        parse_catalogue(parse_yaml(text, "cat.yaml"), "cat.yaml", text.encode())
    assert info.value.file == "cat.yaml" and info.value.line is not None


def test_hook_capabilities_cannot_take_an_existing_alias(catalogue: Catalogue) -> None:
    spec = CapabilitySpec("acme.fp8", "acme fp8", aliases=("dtype.fp8",))
    with pytest.raises(ConfigError, match="alias 'dtype.fp8' already resolves to"):
        catalogue.with_capabilities([spec])
    added = catalogue.with_capabilities([CapabilitySpec("acme.op", "op", aliases=("acme.legacy_op",))])
    assert added.check_name("acme.legacy_op").name == "acme.op"
    assert added.digest != catalogue.digest


def test_markers_with_pytorch_names_run_and_skip_naming_the_real_capability(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.requires_capability("attention.flash_attention")
        def test_flash(device):
            pass

        @pytest.mark.requires_capability("attention.mem_efficient_attention")
        def test_mem_efficient(device):
            pass

        @pytest.mark.requires_capability("dtype.fp8", native=True)
        def test_fp8_natively(device):
            pass
        """
    )
    result = pytester.runpytest("-rs", "--devcaps-devices=cpu",
                                "--devcaps-set=attention.flash=native",
                                "--devcaps-set=attention.mem_efficient=unsupported",
                                "--devcaps-set=mm.scaled=emulated")
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines([
        "*requires attention.mem_efficient_attention (alias of attention.mem_efficient) on cpu: "
        "unsupported (cli: set on the command line)*",
        "*requires native dtype.fp8 (alias of mm.scaled) on cpu: emulated (cli:*",
    ])


def test_a_misspelt_pytorch_name_in_a_marker_fails_collection(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.requires_capability("attention.flash_atention")
        def test_flash(device):
            pass
        """
    )
    result = pytester.runpytest("--devcaps-devices=cpu")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*did you mean 'attention.flash_attention'?*"])


def test_settings_and_override_keys_take_the_capabilitys_own_name(tmp_path: Path) -> None:
    from pytest_devcaps.registry import CapabilitySetting
    from pytest_devcaps.model import Level

    with pytest.raises(ConfigError, match="'dtype.fp8' is an alias of 'mm.scaled'; use the "
                                          "capability name 'mm.scaled'"):
        build_registry(RegistryOptions(profile="nvidia-h100",
                                       settings=(CapabilitySetting("dtype.fp8", Level.NATIVE),)))
    override = tmp_path / "ov.yaml"
    override.write_text("devcaps: 1\noverrides:\n  - set:\n      lib.triton: native\n")
    with pytest.raises(ConfigError, match="'lib.triton' is an alias of 'compile.triton'") as info:
        build_registry(RegistryOptions(profile="nvidia-h100", overrides=(str(override),)))
    assert info.value.line == 4
