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


def _fleet(path: Path, devices: int, extra: str = "") -> Path:
    row = ('    - {{type: cuda, vendor: nvidia, arch: sm_90, index: {i}, memory_gib: 80, '
           'facts: {{sm: 90, cuda_version: "12.8"}}}}\n')
    path.write_text("devcaps: 1\nprofile:\n  name: fleet\n  devices:\n"
                    + "".join(row.format(i=i) for i in range(devices)) + extra)
    return path


def _cpu_seconds(catalogue: Catalogue, path: Path) -> float:
    import time

    start = time.process_time()
    profile = load_profile(path, catalogue)
    spent = time.process_time() - start
    assert profile.identities[-1].index == len(profile.identities) - 1
    return spent


def test_a_profile_of_many_devices_loads_in_linear_time(catalogue: Catalogue,
                                                        tmp_path: Path) -> None:
    """Hostile: a fleet profile 8 times larger must cost about 8 times more, not 64 (CPU time,
    which other processes on a busy machine disturb far less than wall time; the best of two)."""
    small = _fleet(tmp_path / "small.yaml", 500)
    large = _fleet(tmp_path / "large.yaml", 4_000)
    per_small = min(_cpu_seconds(catalogue, small) for _ in range(2)) / 500
    per_large = min(_cpu_seconds(catalogue, large) for _ in range(2)) / 4_000
    assert per_large < 2.5 * per_small, (per_small, per_large)


def test_parsing_leaves_the_garbage_collector_as_it_found_it(catalogue: Catalogue,
                                                             tmp_path: Path) -> None:
    import gc

    broken = _fleet(tmp_path / "broken.yaml", 10, extra="    - [unclosed\n")
    assert gc.isenabled()
    with pytest.raises(ConfigError, match="YAML syntax error"):
        load_profile(broken, catalogue)
    assert gc.isenabled()
    gc.disable()
    try:
        load_profile(_fleet(tmp_path / "ok.yaml", 10), catalogue)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_star_inside_a_string_still_gets_the_alias_check(catalogue: Catalogue,
                                                            tmp_path: Path) -> None:
    """The alias check is skipped only where no alias can be: a '*' anywhere turns it on, so a
    bomb hidden after a '*' in a string is still refused."""
    bomb = ("devcaps: 1\nprofile:\n  name: 'a*b'\n  devices:\n    - &d0 {type: cpu, arch: x}\n"
            + "".join(f"    - &d{i} [*d{i - 1}, *d{i - 1}, *d{i - 1}, *d{i - 1}, *d{i - 1}, "
                      f"*d{i - 1}, *d{i - 1}, *d{i - 1}, *d{i - 1}]\n" for i in range(1, 9)))
    path = tmp_path / "bomb.yaml"
    path.write_text(bomb)
    with pytest.raises(ConfigError, match="an alias bomb"):
        load_profile(path, catalogue)
