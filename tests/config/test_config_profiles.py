from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from pytest_devcaps.config import Catalogue, list_profiles, load_profile
from pytest_devcaps.errors import ConfigError
from pytest_devcaps.model import Level

SHIPPED = [
    "amd-mi250x", "amd-mi300x", "amd-mi355x", "amd-rx7900xtx", "amd-rx9070xt", "apple-m1",
    "apple-m3", "cpu-amx", "cpu-avx2", "cpu-granite-rapids", "cpu-graviton3", "cpu-zen4",
    "habana-gaudi2", "habana-gaudi3", "intel-arc-a770", "intel-max-1550", "nvidia-a100",
    "nvidia-b200", "nvidia-dgx-spark", "nvidia-h100", "nvidia-h200", "nvidia-l4", "nvidia-rtx3090",
    "nvidia-rtx5090", "nvidia-t4", "nvidia-v100",
]


def test_list_profiles() -> None:
    assert list_profiles() == SHIPPED


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_profiles_load(catalogue: Catalogue, name: str) -> None:
    profile = load_profile(name, catalogue)
    assert profile.name == name
    assert profile.description
    assert profile.source.endswith(f"{name}.yaml")
    assert len(profile.identities) == 1
    device = profile.identities[0]
    assert device.arch and device.memory_bytes and device.count >= 1
    assert (device.type == "cpu") == name.startswith("cpu-")


def test_h100_profile_fields(catalogue: Catalogue) -> None:
    device = load_profile("nvidia-h100", catalogue).identities[0]
    assert (device.type, device.index, device.vendor, device.arch) == ("cuda", 0, "nvidia", "sm_90")
    assert device.key == f"{device.type}:{device.index}" and device.count == 8
    assert device.memory_bytes == 80 * 2**30
    facts = device.rule_facts()
    assert facts["compute_capability"] == 9.0 and facts["sm"] == 90
    assert facts["cuda_version"] == "12.8" and facts["cudnn_version"] == 91000
    assert facts["memory_gib"] == 80


def test_cpu_profile_has_no_index_and_isa_list(catalogue: Catalogue) -> None:
    device = load_profile("cpu-amx", catalogue).identities[0]
    assert device.index is None and device.key == "cpu"
    assert {"amx_bf16", "amx_int8", "avx512_bf16", "avx512_fp16"} <= set(device.facts["isa"])


def test_profile_from_path_with_fixed_answers(write_yaml: Callable[..., Path],
                                              catalogue: Catalogue) -> None:
    path = write_yaml("""
        devcaps: 1
        profile:
          name: lab-box
          devices:
            - {type: cuda, vendor: NVIDIA, arch: sm_89, memory_bytes: 1024, count: 2,
               facts: {compute_capability: 8.9}}
            - {type: openreg, arch: v1, index: 3}
          fixed:
            dtype.fp8_e4m3fn: unsupported
            attention.flash: {level: emulated, reason: "lab firmware"}
        """, "lab-box.yaml")
    profile = load_profile(path, catalogue)
    assert load_profile(str(path), catalogue) == profile
    assert profile.name == "lab-box" and profile.description == ""
    first, second = profile.identities
    assert (first.vendor, first.name, first.memory_bytes, first.count) == ("nvidia", "cuda", 1024, 2)
    assert (second.vendor, second.key) == ("openreg", "openreg:3")
    assert profile.fixed["dtype.fp8_e4m3fn"].level is Level.UNSUPPORTED
    assert profile.fixed["dtype.fp8_e4m3fn"].reason == "fixed by profile lab-box"
    assert profile.fixed["attention.flash"].reason == "lab firmware"


def test_unknown_profile_name_suggests_closest(catalogue: Catalogue) -> None:
    with pytest.raises(ConfigError) as info:
        load_profile("nvidia-h10", catalogue)
    assert "did you mean 'nvidia-h100'" in str(info.value)
    assert "amd-mi300x" in str(info.value)


def test_missing_profile_file(catalogue: Catalogue, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        load_profile(tmp_path / "nope.yaml", catalogue)
