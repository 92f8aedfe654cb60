"""classify() on every shipped profile: the vendor rules must be true to the hardware."""

from __future__ import annotations

import pytest

from pytest_devcaps.config import Catalogue, classify, list_profiles, load_profile
from pytest_devcaps.model import DeviceIdentity, Level

N, E, U, K = Level.NATIVE, Level.EMULATED, Level.UNSUPPORTED, Level.UNKNOWN

# profile -> capability -> (level, words the reason must contain)
EXPECTED: dict[str, dict[str, tuple[Level, tuple[str, ...]]]] = {
    "nvidia-h100": {
        "dtype.fp8_e4m3fn": (N, ("sm_89", "sm_90")), "dtype.fp8_e4m3fnuz": (U, ("gfx942",)),
        "mm.scaled_rowwise": (N, ()), "attention.flash": (N, ("sm_80",)),
        "attention.cudnn": (N, ("91000",)), "runtime.graphs": (N, ()), "dtype.tf32": (N, ()),
        "dtype.bf16": (N, ()), "dist.nccl": (N, ()), "dist.xccl": (U, ("Intel",)),
    },
    "nvidia-h200": {"dtype.fp8_e5m2": (N, ()), "attention.flash": (N, ()), "dtype.tf32": (N, ())},
    "nvidia-b200": {"dtype.fp8_e4m3fn": (N, ("sm_100",)), "mm.scaled": (N, ()),
                    "attention.flash": (N, ()), "runtime.graphs": (N, ())},
    "nvidia-a100": {
        "dtype.fp8_e4m3fn": (U, ("sm_89", "sm_80")), "mm.scaled": (U, ("sm_80",)),
        "attention.flash": (N, ()), "dtype.tf32": (N, ()), "dtype.bf16": (N, ()),
    },
    "nvidia-rtx3090": {
        "dtype.fp8_e4m3fn": (U, ("sm_89", "sm_86")), "dtype.fp8_e5m2": (U, ("sm_86",)),
        "mm.scaled_rowwise": (U, ("sm_86",)), "attention.flash": (N, ()),
        "runtime.graphs": (N, ()), "dtype.tf32": (N, ()), "dtype.bf16": (N, ()),
    },
    "amd-mi300x": {
        "dtype.fp8_e4m3fnuz": (N, ("gfx942",)), "dtype.fp8_e5m2fnuz": (N, ()),
        "dtype.fp8_e4m3fn": (U, ("gfx950", "gfx942", "fnuz")), "mm.scaled": (N, ()),
        "mm.scaled_rowwise": (N, ()), "attention.flash": (N, ("gfx942",)),
        "attention.cudnn": (U, ("cuDNN",)), "runtime.graphs": (N, ()), "dtype.tf32": (N, ()),
        "dtype.bf16": (N, ()), "dist.nccl": (N, ("RCCL",)),
    },
    "amd-mi355x": {
        "dtype.fp8_e4m3fn": (N, ("gfx950",)), "dtype.fp8_e4m3fnuz": (U, ("gfx942", "gfx950")),
        "mm.scaled_rowwise": (N, ()), "attention.flash": (N, ()), "runtime.graphs": (N, ()),
        "dtype.tf32": (N, ()), "dtype.bf16": (N, ()),
    },
    "intel-max-1550": {
        "dtype.fp8_e4m3fn": (E, ("pvc", "fp16")), "attention.flash": (N, ("pvc",)),
        "runtime.graphs": (N, ()), "dtype.tf32": (N, ("pvc",)), "dtype.bf16": (N, ()),
        "dtype.fp64": (N, ()), "dist.xccl": (N, ()), "dist.nccl": (U, ("intel",)),
    },
    "habana-gaudi3": {
        "dtype.fp8_e4m3fn": (N, ("Gaudi 2", "gaudi3")), "attention.flash": (N, ()),
        "runtime.graphs": (N, ()), "dtype.tf32": (U, ("gaudi3",)), "dtype.bf16": (N, ()),
        "dtype.fp64": (U, ()), "dist.hccl": (N, ()), "compile.triton": (U, ()),
    },
    "apple-m3": {
        "dtype.fp8_e4m3fn": (U, ("apple-m3",)), "attention.flash": (U, ()),
        "runtime.graphs": (U, ()), "dtype.tf32": (U, ()), "dtype.bf16": (N, ("M2",)),
        "dtype.fp64": (U, ()), "compile.inductor": (K, ()), "dist.gloo": (N, ()),
    },
    "cpu-amx": {
        "dtype.fp8_e4m3fn": (E, ()), "dtype.fp8_e4m3fnuz": (E, ()), "mm.scaled": (N, ("amx",)),
        "attention.flash": (N, ()), "attention.mem_efficient": (U, ()),
        "runtime.graphs": (U, ("cpu",)), "runtime.pinned_memory": (U, ("host-to-accelerator",)),
        "dtype.tf32": (U, ("GPU tensor-core",)), "dtype.bf16": (N, ("amx_bf16",)),
        "dtype.fp16": (N, ("avx512_fp16",)), "compile.triton": (U, ()), "dist.gloo": (N, ()),
        "dist.nccl": (U, ("found cpu cpu",)),
    },
}


def test_expectations_cover_every_shipped_profile() -> None:
    assert sorted(EXPECTED) == list_profiles()


@pytest.mark.parametrize(
    ("profile", "capability", "level", "words"),
    [(profile, cap, level, words) for profile, caps in EXPECTED.items()
     for cap, (level, words) in caps.items()],
)
def test_vendor_rules_on_shipped_profiles(catalogue: Catalogue, profile: str, capability: str,
                                          level: Level, words: tuple[str, ...]) -> None:
    verdict = classify(catalogue, load_profile(profile, catalogue).identities[0])[capability]
    assert verdict.level is level, verdict.reason
    for word in words:
        assert word in verdict.reason
    assert "{" not in verdict.reason


def _nvidia(cc: float, **facts: object) -> DeviceIdentity:
    sm = round(cc * 10)
    return DeviceIdentity(type="cuda", index=0, vendor="nvidia", name="GPU", arch=f"sm_{sm}",
                          facts={"compute_capability": cc, "sm": sm, **facts})


@pytest.mark.parametrize(
    ("identity", "capability", "level"),
    [
        (_nvidia(8.9), "dtype.fp8_e4m3fn", N),  # Ada
        (_nvidia(7.5), "dtype.bf16", E),
        (_nvidia(7.5), "dtype.tf32", U),
        (_nvidia(7.5), "attention.flash", U),
        (_nvidia(9.0, platform="win32"), "attention.flash", U),
        (_nvidia(9.0, cudnn_version=None), "attention.cudnn", U),
        (_nvidia(9.0, cudnn_version=89000), "attention.cudnn", U),
        (_nvidia(6.0), "compile.triton", U),
        (_nvidia(6.0), "mm.int8", U),
    ],
)
def test_nvidia_thresholds(catalogue: Catalogue, identity: DeviceIdentity, capability: str,
                           level: Level) -> None:
    assert classify(catalogue, identity)[capability].level is level


def test_windows_flash_reason_names_the_platform(catalogue: Catalogue) -> None:
    reason = classify(catalogue, _nvidia(9.0, platform="win32"))["attention.flash"].reason
    assert "win32" in reason and "Linux" in reason


@pytest.mark.parametrize(
    ("arch", "capability", "level"),
    [("gfx1201", "dtype.fp8_e4m3fn", N), ("gfx1201", "mm.scaled_rowwise", U),
     ("gfx90a", "dtype.fp8_e4m3fnuz", U), ("gfx90a", "attention.flash", N),
     ("gfx1030", "attention.flash", U), ("gfx906", "dtype.bf16", E), ("gfx1100", "dtype.tf32", U)],
)
def test_amd_arch_lists(catalogue: Catalogue, arch: str, capability: str, level: Level) -> None:
    device = DeviceIdentity(type="cuda", index=0, vendor="amd", name="Radeon", arch=arch,
                            facts={"gcn_arch": arch, "rocm_version": "6.4"})
    assert classify(catalogue, device)[capability].level is level


def test_missing_facts_leave_the_answer_to_the_probe(catalogue: Catalogue) -> None:
    # An Intel GPU whose backend could not report has_fp64: no fp64 verdict rather than a guess.
    xpu = DeviceIdentity(type="xpu", index=0, vendor="intel", name="Arc", arch="acm",
                         facts={"xe_generation": 1})
    verdicts = classify(catalogue, xpu)
    assert "dtype.fp64" not in verdicts
    assert verdicts["attention.flash"].level is U
    arc = DeviceIdentity(type="xpu", index=0, vendor="intel", name="Arc", arch="acm",
                         facts={"xe_generation": 1, "has_fp64": False})
    assert classify(catalogue, arc)["dtype.fp64"].level is U


def test_plain_cpu_emulates_bf16(catalogue: Catalogue) -> None:
    cpu = DeviceIdentity(type="cpu", index=None, vendor="cpu", name="EPYC", arch="avx2",
                         facts={"isa": ["avx2"], "cpu_capability": "AVX2"})
    verdicts = classify(catalogue, cpu)
    assert verdicts["dtype.bf16"].level is E
    assert "avx2" in verdicts["dtype.bf16"].reason
    assert verdicts["mm.scaled"].level is E
    assert "mm.int8" not in verdicts and "dist.mpi" not in verdicts
