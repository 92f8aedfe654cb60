"""classify() on every shipped profile and on every architecture PyTorch gates: the vendor rules
must be true to PyTorch 2.13's own checks (each expectation cites the check) and agree with the
gates the probes read their outcomes against."""

from __future__ import annotations


import pytest

from pytest_devcaps.config import Catalogue, classify, list_profiles, load_profile
from pytest_devcaps.config.catalogue import parse_catalogue
from pytest_devcaps.config.yamlsource import parse_yaml
from pytest_devcaps.errors import ConfigError
from pytest_devcaps.model import DeviceIdentity, Level

N, E, U, K = Level.NATIVE, Level.EMULATED, Level.UNSUPPORTED, Level.UNKNOWN
A = "available"  # native or emulated


def _nvidia(cc: float, **facts: object) -> DeviceIdentity:
    sm = round(cc * 10)
    base = {"compute_capability": cc, "sm": sm, "cuda_version": "12.8", "cudnn_version": 91000,
            "platform": "linux"}
    return DeviceIdentity(type="cuda", index=0, vendor="nvidia", name="GPU", arch=f"sm_{sm}",
                          facts={**base, **facts})


def _amd(arch: str, rocm: str | None = "7.0") -> DeviceIdentity:
    facts = {"gcn_arch": arch, "platform": "linux"}
    if rocm is not None:
        facts["rocm_version"] = rocm
    return DeviceIdentity(type="cuda", index=0, vendor="amd", name="Radeon", arch=arch, facts=facts)


def _intel(arch: str, **facts: object) -> DeviceIdentity:
    return DeviceIdentity(type="xpu", index=0, vendor="intel", name="Intel GPU", arch=arch,
                          facts={"xe_generation": 2, "has_fp64": True, **facts})


def _cpu(*isa: str, capability: str = "AVX512", platform: str = "linux") -> DeviceIdentity:
    return DeviceIdentity(type="cpu", index=None, vendor="cpu", name="CPU", arch="x",
                          facts={"isa": list(isa), "cpu_capability": capability,
                                 "platform": platform})


def _apple(generation: int, macos: str = "14.4") -> DeviceIdentity:
    return DeviceIdentity(type="mps", index=0, vendor="apple", name="Apple", arch=f"apple-m{generation}",
                          facts={"chip_generation": generation, "macos_version": macos})


def _gaudi(generation: int) -> DeviceIdentity:
    return DeviceIdentity(type="hpu", index=0, vendor="habana", name="GAUDI", arch=f"gaudi{generation}",
                          facts={"gaudi_generation": generation})


def _level(catalogue: Catalogue, identity: DeviceIdentity, capability: str) -> Level:
    verdicts = classify(catalogue, identity)
    return verdicts[capability].level if capability in verdicts else K


def _matches(level: Level, expected: Level | str) -> bool:
    return level.available if expected == A else level is expected


# --- every shipped profile ----------------------------------------------------------------

# profile -> capability -> (level, words the reason must contain)
EXPECTED: dict[str, dict[str, tuple[Level, tuple[str, ...]]]] = {
    "nvidia-v100": {"dtype.bf16": (E, ("sm_80",)), "dtype.tf32": (U, ()),
                    "attention.flash": (U, ("sm_80",)), "attention.mem_efficient": (N, ()),
                    "compile.triton": (N, ("sm_70",)), "mm.int8": (N, ()),
                    "dtype.fp8_e4m3fn": (U, ("sm_89",)), "attention.flex": (U, ("sm_80",)),
                    "mm.grouped": (E, ())},
    "nvidia-t4": {"dtype.bf16": (E, ()), "attention.flash": (U, ()), "mm.scaled": (U, ()),
                  "attention.cudnn": (U, ()), "mm.int8": (N, ())},
    "nvidia-a100": {
        "dtype.fp8_e4m3fn": (U, ("sm_89", "sm_80", "stored")), "mm.scaled": (U, ("sm_80",)),
        "attention.flash": (N, ()), "dtype.tf32": (N, ()), "dtype.bf16": (N, ()),
        "dist.gloo": (N, ("CUDA",)), "mm.grouped": (E, ()), "mm.scaled_mx": (U, ("sm_100",)),
    },
    "nvidia-rtx3090": {
        "dtype.fp8_e4m3fn": (U, ("sm_89", "sm_86")), "dtype.fp8_e5m2": (U, ("sm_86",)),
        "mm.scaled_rowwise": (U, ("sm_86",)), "attention.flash": (N, ()),
        "runtime.graphs": (N, ()), "dtype.tf32": (N, ()), "dtype.bf16": (N, ()),
    },
    "nvidia-l4": {"dtype.fp8_e4m3fn": (N, ("sm_89",)), "mm.scaled_rowwise": (N, ()),
                  "mm.grouped": (E, ()), "dtype.fp4_e2m1": (U, ())},
    "nvidia-h100": {
        "runtime.sleep": (N, ("torch.cuda._sleep",)),
        "dtype.fp8_e4m3fn": (N, ("sm_89", "sm_90")), "dtype.fp8_e4m3fnuz": (U, ("gfx942",)),
        "mm.scaled_rowwise": (N, ()), "attention.flash": (N, ("sm_80",)),
        "attention.cudnn": (N, ("91000",)), "runtime.graphs": (N, ()), "dtype.tf32": (N, ()),
        "dtype.bf16": (N, ()), "dist.nccl": (N, ()), "dist.xccl": (U, ("Intel",)),
        "mm.grouped": (N, ("sm_90",)), "mm.scaled_mx": (U, ()), "attention.flex": (N, ()),
    },
    "nvidia-h200": {"dtype.fp8_e5m2": (N, ()), "attention.flash": (N, ()), "dtype.tf32": (N, ())},
    "nvidia-b200": {"dtype.fp8_e4m3fn": (N, ("sm_100",)), "mm.scaled": (N, ()),
                    "attention.flash": (N, ()), "runtime.graphs": (N, ()),
                    "mm.scaled_mx": (N, ("sm_100", "12.8")), "dtype.fp4_e2m1": (N, ()),
                    "mm.grouped": (N, ())},
    "nvidia-rtx5090": {"mm.scaled_mx": (N, ()), "mm.grouped": (E, ("sm_120",)),
                       "attention.flash": (N, ("sm_121",)), "mm.scaled_rowwise": (N, ())},
    "nvidia-dgx-spark": {"attention.flash": (N, ("sm_121",)), "attention.cudnn": (N, ()),
                         "attention.mem_efficient": (N, ()), "mm.scaled_mx": (N, ())},
    "amd-mi250x": {"attention.flash": (N, ("gfx90a",)), "dtype.fp8_e4m3fnuz": (U, ()),
                   "mm.scaled": (U, ()), "dtype.tf32": (U, ()), "mm.int8": (N, ())},
    "amd-mi300x": {
        "runtime.sleep": (N, ("HIP stream",)),
        "dtype.fp8_e4m3fnuz": (N, ("gfx942",)), "dtype.fp8_e5m2fnuz": (N, ()),
        "dtype.fp8_e4m3fn": (U, ("gfx950", "gfx942", "fnuz")), "mm.scaled": (N, ()),
        "mm.scaled_rowwise": (N, ()), "attention.flash": (N, ("gfx942",)),
        "attention.cudnn": (U, ("cuDNN",)), "runtime.graphs": (N, ()), "dtype.tf32": (N, ()),
        "dtype.bf16": (N, ()), "dist.nccl": (N, ("RCCL",)), "dist.gloo": (N, ()),
        "mm.int8": (N, ()), "mm.grouped": (E, ("CK",)),
    },
    "amd-mi355x": {
        "dtype.fp8_e4m3fn": (N, ("gfx950", "7.0")), "dtype.fp8_e4m3fnuz": (U, ("gfx942", "gfx950")),
        "mm.scaled_rowwise": (N, ()), "attention.flash": (N, ()), "runtime.graphs": (N, ()),
        "dtype.tf32": (N, ()), "dtype.bf16": (N, ()), "mm.scaled_mx": (N, ("gfx950",)),
        "dtype.fp4_e2m1": (N, ()),
    },
    "amd-rx7900xtx": {"attention.flash": (N, ("gfx1100",)), "dtype.fp8_e4m3fn": (U, ()),
                      "mm.scaled": (U, ()), "dtype.tf32": (U, ())},
    "amd-rx9070xt": {"dtype.fp8_e4m3fn": (N, ("gfx1201",)), "mm.scaled_rowwise": (N, ()),
                     "attention.flash": (N, ()), "mm.scaled_mx": (U, ("gfx950",))},
    "intel-max-1550": {
        "runtime.sleep": (K, ("torch 2.14", "decides")),
        "dtype.fp8_e4m3fn": (E, ("pvc", "fp16")), "attention.flash": (N, ("pvc",)),
        "runtime.graphs": (N, ()), "dtype.tf32": (N, ("pvc",)), "dtype.bf16": (N, ()),
        "dtype.fp64": (N, ()), "dist.xccl": (N, ()), "dist.nccl": (U, ("intel",)),
        "mm.int8": (N, ()), "mm.scaled_rowwise": (E, ()), "attention.mem_efficient": (U, ()),
        "dist.gloo": (U, ("cpu and cuda",)), "dtype.fp8_e4m3fnuz": (U, ("oneDNN",)),
    },
    "intel-arc-a770": {"dtype.fp64": (U, ()), "attention.flash": (U, ("acm",)),
                       "dtype.tf32": (U, ("acm",)), "dtype.bf16": (N, ())},
    "habana-gaudi2": {"runtime.sleep": (K, ("probe to decide",)), "dtype.fp8_e4m3fn": (K, ("probe decides",)), "dtype.fp16": (N, ()),
                      "dtype.fp64": (U, ())},
    "habana-gaudi3": {
        "dtype.fp8_e4m3fn": (K, ("torch._scaled_mm",)), "attention.flash": (K, ("FusedSDPA",)),
        "runtime.graphs": (K, ("Lazy",)), "dtype.tf32": (U, ("gaudi3",)), "dtype.bf16": (N, ()),
        "dtype.fp64": (U, ()), "dist.hccl": (N, ()), "compile.triton": (U, ()),
        "compile.inductor": (U, ("hpu_backend",)), "dist.gloo": (U, ()),
    },
    "apple-m1": {"dtype.bf16": (E, ("M2",)), "attention.flash": (U, ("math",))},
    "apple-m3": {
        "runtime.sleep": (U, ("no device-side spin",)),
        "dtype.fp8_e4m3fn": (U, ("apple-m3",)), "attention.flash": (U, ("math",)),
        "attention.mem_efficient": (U, ()), "runtime.graphs": (U, ()), "dtype.tf32": (U, ()),
        "dtype.bf16": (N, ("M2",)), "dtype.fp64": (U, ()), "compile.inductor": (N, ("Metal",)),
        "dist.gloo": (U, ("PYTORCH_ENABLE_MPS_FALLBACK",)), "runtime.events": (N, ("torch.mps.Event",)),
        "mm.int8": (U, ("MPS",)), "attention.flex": (N, ()),
    },
    "cpu-amx": {
        "dtype.fp8_e4m3fn": (E, ("reference kernel",)), "dtype.fp8_e4m3fnuz": (E, ("rowwise",)),
        "mm.scaled": (E, ("oneDNN reference kernel: orders of magnitude slower than bf16", "AMX-INT8")),
        "mm.scaled_rowwise": (E, ("rowwise",)), "attention.flash": (N, ()),
        "attention.mem_efficient": (U, ()), "runtime.graphs": (U, ("cpu",)),
        "runtime.pinned_memory": (U, ("host-to-accelerator",)), "dtype.tf32": (U, ("AMX-FP16",)),
        "dtype.bf16": (N, ("amx_bf16",)), "dtype.fp16": (N, ("avx512_fp16",)),
        "compile.triton": (U, ()), "dist.gloo": (N, ()), "dist.nccl": (U, ("found cpu cpu",)),
        "mm.int8": (N, ()), "attention.flex": (N, ("AVX2",)),
    },
    "cpu-granite-rapids": {"dtype.tf32": (N, ("AMX-FP16",)),
                           "dtype.fp8_e4m3fnuz": (E, ("rowwise", "fp32-upcast", "no fnuz")),
                           "dtype.fp8_e5m2fnuz": (E, ("rowwise",)),
                           "dtype.fp8_e4m3fn": (E, ("reference kernel",)),
                           "mm.scaled": (E, ("oneDNN reference kernel",))},
    "cpu-zen4": {"dtype.bf16": (N, ("avx512_bf16",)), "dtype.fp16": (E, ()), "mm.scaled": (E, ()),
                 "dtype.tf32": (U, ())},
    "cpu-avx2": {"dtype.bf16": (E, ()), "dtype.fp16": (E, ()), "mm.int8": (N, ()),
                 "attention.flex": (N, ())},
    "cpu-graviton3": {"dtype.bf16": (N, ("FEAT_BF16",)), "dtype.fp16": (N, ("FEAT_FP16",)),
                      "attention.flex": (U, ("AVX2",)), "mm.scaled": (E, ())},
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


@pytest.mark.parametrize("profile", list_profiles())
def test_every_capability_is_answered_or_says_what_decides(catalogue: Catalogue,
                                                          profile: str) -> None:
    """No silent unknown: each capability gets a rule verdict, and an unknown one says what
    decides it (the probe, an override, or a build fact)."""
    verdicts = classify(catalogue, load_profile(profile, catalogue).identities[0])
    assert set(verdicts) == set(catalogue.names())
    for capability, verdict in verdicts.items():
        if verdict.level is K:
            assert "decide" in verdict.reason, (capability, verdict.reason)


# --- the rule source is part of the schema ----------------------------------------------------

def test_every_shipped_rule_cites_its_source(catalogue: Catalogue) -> None:
    for vendor, by_cap in catalogue.rules.items():
        for capability, rules in by_cap.items():
            for rule in rules:
                assert rule.source and len(rule.source) > 20, (vendor, capability, rule.line)


def test_a_shipped_catalogue_rule_without_source_is_refused() -> None:
    text = ("devcaps: 1\ncapabilities:\n  x.y: {description: d}\nvendors:\n  cpu:\n"
            "    x.y:\n      - level: native\n        reason: \"found it\"\n")
    with pytest.raises(ConfigError, match="missing required key 'source'") as info:
        parse_catalogue(parse_yaml(text, "cat.yaml"), "cat.yaml", text.encode(),
                        require_sources=True)
    assert info.value.line == 7
    # other catalogues (tests, hook-style experiments) may leave it out
    parse_catalogue(parse_yaml(text, "cat.yaml"), "cat.yaml", text.encode())


# --- known wrong answers, fixed in the rules (each cites the PyTorch check) --------------------

@pytest.mark.parametrize(("identity", "level"), [
    # distributed_c10d.py Backend.backend_capability: gloo handles cpu and cuda (HIP) tensors
    (_nvidia(9.0), N), (_amd("gfx942"), N),
    # c10d Ops.cpp registers allreduce_ for CPU, CUDA and PrivateUse1 only: no MPS kernel
    (_apple(3), U),
    (_intel("pvc"), U), (_gaudi(3), U), (_cpu("avx2"), N),
])
def test_gloo_follows_backend_capability(catalogue: Catalogue, identity: DeviceIdentity,
                                         level: Level) -> None:
    assert _level(catalogue, identity, "dist.gloo") is level


@pytest.mark.parametrize(("identity", "level"), [
    # native_functions.yaml _int_mm: CPU, CUDA (ROCm too) and XPU kernels, no architecture check
    (_nvidia(6.0), N), (_nvidia(7.5), N), (_amd("gfx90a"), N), (_amd("gfx1100"), N),
    (_intel("acm"), N), (_cpu("avx2"), N), (_cpu("neon", "sve"), N),
    (_apple(2), U),  # no MPS kernel
])
def test_int_mm_follows_its_dispatch_keys(catalogue: Catalogue, identity: DeviceIdentity,
                                          level: Level) -> None:
    verdict = classify(catalogue, identity)["mm.int8"]
    assert verdict.level is level
    assert "sm_75+" not in verdict.reason  # PyTorch has no sm_75 requirement


@pytest.mark.parametrize(("isa", "scaled", "rowwise"), [
    # Blas.cpp _scaled_mm_out_cpu: oneDNN (mkldnn_scaled_mm) needs single-element scales and
    # amx_int8 (same dtypes), and runs fp8 on its reference kernel there (ONEDNN_VERBOSE
    # ref:any): emulated, like the fp32-upcast fallback that rowwise scales always take
    (("avx2", "avx512", "avx512_bf16", "amx_bf16", "amx_int8"), E, E),
    (("avx2", "avx512", "avx512_bf16", "amx_bf16", "amx_int8", "amx_fp16"), E, E),
    (("avx2", "avx512", "avx512_bf16", "amx_bf16"), E, E),  # amx_bf16 alone does not count
    (("avx2",), E, E),
])
def test_cpu_scaled_mm_takes_the_onednn_path_only_as_pytorch_does(
        catalogue: Catalogue, isa: tuple[str, ...], scaled: Level, rowwise: Level) -> None:
    assert _level(catalogue, _cpu(*isa), "mm.scaled") is scaled
    assert _level(catalogue, _cpu(*isa), "mm.scaled_rowwise") is rowwise


def test_cpu_scaled_mm_with_amx_int8_names_the_onednn_reference_kernel(catalogue: Catalogue) -> None:
    """Tensorwise fp8 on AMX-INT8 reaches oneDNN's reference matmul (ref:any, ~4,700x the bf16
    time at 1024^3): the answer is emulated and the reason names the cost, never native."""
    for isa in (("avx512", "amx_bf16", "amx_int8"), ("avx512", "amx_bf16", "amx_int8", "amx_fp16")):
        verdict = classify(catalogue, _cpu(*isa))["mm.scaled"]
        assert verdict.level is E
        assert "oneDNN reference kernel: orders of magnitude slower than bf16" in verdict.reason
    plain = classify(catalogue, _cpu("avx2"))["mm.scaled"]
    assert plain.level is E and "reference kernel" not in plain.reason  # the upcast path


@pytest.mark.parametrize("isa", [
    ("avx2",), ("avx512", "amx_bf16", "amx_int8"), ("avx512", "amx_bf16", "amx_int8", "amx_fp16"),
])
@pytest.mark.parametrize("capability", ["dtype.fp8_e4m3fnuz", "dtype.fp8_e5m2fnuz"])
def test_cpu_fnuz_is_emulated_because_rowwise_scales_take_the_upcast_path(
        catalogue: Catalogue, isa: tuple[str, ...], capability: str) -> None:
    # Blas.cpp _scaled_mm_out_cpu: mkldnn_scaled_mm (no fnuz types) only for single-element
    # scales; rowwise-scaled fnuz goes to _scaled_mm_out_cpu_emulated (measured correct on AMX)
    verdict = classify(catalogue, _cpu(*isa))[capability]
    assert verdict.level is E, verdict.reason
    if "amx_int8" in isa:
        assert "rowwise" in verdict.reason and "no fnuz" in verdict.reason


@pytest.mark.parametrize("profile", ["cpu-amx", "cpu-granite-rapids"])
def test_pytorchs_dtype_fp8_is_not_native_on_amx_profiles(profile: str) -> None:
    """dtype.fp8 is PyTorch's alias of mm.scaled: requires_capability("dtype.fp8", native=True)
    must not run on an AMX CPU, whose fp8 GEMM is oneDNN's reference kernel."""
    from pytest_devcaps.registry import RegistryOptions, build_registry

    registry = build_registry(RegistryOptions(profile=profile))
    record = registry.record("dtype.fp8", "cpu")
    assert record.capability == "mm.scaled"
    assert record.level is E and "oneDNN reference kernel" in record.reason


@pytest.mark.parametrize(("isa", "level"), [
    # mkldnn Matmul.cpp use_mkldnn_tf32_matmul: x86 with AMX-FP16 and fp32_precision tf32;
    # common_mkldnn.py tf32_is_not_fp32 asks torch.cpu._is_amx_fp16_supported()
    (("avx2", "avx512", "amx_bf16", "amx_int8", "amx_fp16"), N),
    (("avx2", "avx512", "amx_bf16", "amx_int8"), U),
    (("avx2",), U),
])
def test_cpu_tf32_needs_amx_fp16(catalogue: Catalogue, isa: tuple[str, ...], level: Level) -> None:
    assert _level(catalogue, _cpu(*isa), "dtype.tf32") is level


def test_apple_mps_answers_that_were_unknown_or_wrong(catalogue: Catalogue) -> None:
    verdicts = classify(catalogue, _apple(3))
    assert verdicts["runtime.events"].level is N  # torch/mps/event.py Event (elapsed_time)
    assert verdicts["compile.inductor"].level is N  # codegen/common.py registers mps (Metal)
    assert verdicts["mm.int8"].level is U  # native_functions.yaml _int_mm: no MPS kernel
    assert verdicts["dist.gloo"].level is U  # c10d Ops.cpp: no MPS kernels
    for backend in ("attention.flash", "attention.mem_efficient", "attention.cudnn"):
        assert verdicts[backend].level is U  # MPS always runs _scaled_dot_product_attention_math_for_mps


@pytest.mark.parametrize("arch", ["pvc", "bmg", "acm", "lnl", "mtl"])
def test_xpu_scaled_mm_takes_rowwise_scales(catalogue: Catalogue, arch: str) -> None:
    # mkldnn/xpu ScaledBlas.cpp _scaled_mm_out_xpu accepts TensorWise and RowWise scaling
    assert _level(catalogue, _intel(arch), "mm.scaled_rowwise") is E
    assert _level(catalogue, _intel(arch), "attention.mem_efficient") is U  # no XPU kernel


@pytest.mark.parametrize(("cc", "flash", "mem_efficient", "cudnn"), [
    # sdp_utils.cpp: flash and cuDNN check_sm_version<sm80, sm121>, mem-efficient <sm50, sm121>
    (4.0, U, U, U), (5.0, U, N, U), (7.5, U, N, U), (8.0, N, N, N), (12.1, N, N, N),
    (12.2, U, U, U), (13.0, U, U, U),
])
def test_attention_rules_have_pytorchs_upper_bound(catalogue: Catalogue, cc: float, flash: Level,
                                                   mem_efficient: Level, cudnn: Level) -> None:
    identity = _nvidia(cc)
    assert _level(catalogue, identity, "attention.flash") is flash
    assert _level(catalogue, identity, "attention.mem_efficient") is mem_efficient
    assert _level(catalogue, identity, "attention.cudnn") is cudnn


@pytest.mark.parametrize(("arch", "rocm", "ocp_fp8", "scaled", "rowwise"), [
    # ScaledBlasDeviceUtils.cpp scaled_mm_arch_allowed (gfx1200/1201 from ROCm 6.3, gfx950 from
    # 6.5) and ScaledBlas.cpp ('Float8_e4m3fn is only supported for ROCm 6.5 and above')
    ("gfx950", "6.4", U, U, U), ("gfx950", "6.5", N, N, N), ("gfx1201", "6.3", U, U, U),
    ("gfx1201", "6.5", N, N, N), ("gfx1200", "7.0", N, N, N), ("gfx942", "6.3", U, N, N),
    ("gfx950", None, K, K, K),  # the version decides, and it is missing: no guess
])
def test_amd_fp8_rules_follow_the_rocm_version(catalogue: Catalogue, arch: str, rocm: str | None,
                                               ocp_fp8: Level, scaled: Level, rowwise: Level) -> None:
    identity = _amd(arch, rocm)
    assert _level(catalogue, identity, "dtype.fp8_e4m3fn") is ocp_fp8
    assert _level(catalogue, identity, "mm.scaled") is scaled
    assert _level(catalogue, identity, "mm.scaled_rowwise") is rowwise


@pytest.mark.parametrize(("cc", "cuda", "level"), [
    # RowwiseScaledMM.cu: no CUTLASS rowwise kernel on _WIN32; ScaledBlas.cpp takes cuBLAS
    # rowwise for major 9 with CUBLAS_VERSION >= 120900
    (9.0, "12.9", N), (9.0, "12.8", U), (8.9, "12.9", U), (10.0, "12.9", U),
])
def test_rowwise_on_windows(catalogue: Catalogue, cc: float, cuda: str, level: Level) -> None:
    verdict = classify(catalogue, _nvidia(cc, platform="win32", cuda_version=cuda))["mm.scaled_rowwise"]
    assert verdict.level is level
    assert "win32" in verdict.reason or "Windows" in verdict.reason


def test_windows_flash_reason_names_the_platform(catalogue: Catalogue) -> None:
    reason = classify(catalogue, _nvidia(9.0, platform="win32"))["attention.flash"].reason
    assert "win32" in reason and "Windows" in reason


# --- device coverage: every NVIDIA arch sm_70..sm_121 ------------------------------------------

_SM_CAPS = ("dtype.bf16", "dtype.tf32", "dtype.fp8_e4m3fn", "mm.scaled_rowwise", "mm.scaled_mx",
            "mm.grouped", "attention.flash", "attention.cudnn", "attention.flex", "compile.triton")
# per arch, the levels of _SM_CAPS; cites: cuda/__init__.py is_bf16/is_tf32_supported,
# ScaledBlasDeviceUtils scaled_mm_arch_allowed, RowwiseScaledMM.cu, evaluate_platform_supports_mx_gemm,
# GroupedBlas.cpp _grouped_mm_cuda, sdp_utils.cpp, IS_FLEX_ATTENTION_CUDA_PLATFORM_SUPPORTED, has_triton
NVIDIA_ARCHS: dict[float, tuple[Level, ...]] = {
    7.0: (E, U, U, U, U, E, U, U, U, N),
    7.2: (E, U, U, U, U, E, U, U, U, N),
    7.5: (E, U, U, U, U, E, U, U, U, N),
    8.0: (N, N, U, U, U, E, N, N, N, N),
    8.6: (N, N, U, U, U, E, N, N, N, N),
    8.7: (N, N, U, U, U, E, N, N, N, N),
    8.9: (N, N, N, N, U, E, N, N, N, N),
    9.0: (N, N, N, N, U, N, N, N, N, N),
    10.0: (N, N, N, N, N, N, N, N, N, N),
    10.3: (N, N, N, N, N, N, N, N, N, N),
    11.0: (N, N, N, N, N, E, N, N, N, N),
    12.0: (N, N, N, N, N, E, N, N, N, N),
    12.1: (N, N, N, N, N, E, N, N, N, N),
}


@pytest.mark.parametrize("cc", sorted(NVIDIA_ARCHS))
def test_every_nvidia_arch(catalogue: Catalogue, cc: float) -> None:
    got = tuple(_level(catalogue, _nvidia(cc), cap) for cap in _SM_CAPS)
    assert dict(zip(_SM_CAPS, got)) == dict(zip(_SM_CAPS, NVIDIA_ARCHS[cc]))


def test_block_scaled_needs_cuda_12_8(catalogue: Catalogue) -> None:
    # cuBLASLt block scaling (MX/NVFP4) needs CUDA 12.8: a cu126 build on a B200 cannot run it
    assert _level(catalogue, _nvidia(10.0, cuda_version="12.6"), "mm.scaled_mx") is U
    assert _level(catalogue, _nvidia(10.0, cuda_version=None), "mm.scaled_mx") is K


# --- AMD, Intel, CPU, Apple, Gaudi --------------------------------------------------------------

@pytest.mark.parametrize(("arch", "capability", "level"), [
    # common_cuda.py evaluate_platform_supports_flash_attention ROCm arch_list
    ("gfx90a", "attention.flash", N), ("gfx942", "attention.mem_efficient", N),
    ("gfx950", "attention.flash", N), ("gfx1100", "attention.flash", N),
    ("gfx1101", "attention.flash", U), ("gfx1151", "attention.flash", U),
    ("gfx1200", "attention.flash", U), ("gfx1201", "attention.flash", N),
    ("gfx1030", "attention.flash", U),
    ("gfx90a", "dtype.fp8_e4m3fnuz", U), ("gfx1201", "mm.scaled_mx", U),
    ("gfx906", "dtype.bf16", E), ("gfx1100", "dtype.tf32", U),
    # torch/cuda/__init__.py is_tf32_supported: gfx94*/gfx95*
    ("gfx950", "dtype.tf32", N), ("gfx942", "mm.grouped", E), ("gfx1100", "attention.flex", N),
])
def test_amd_arch_lists(catalogue: Catalogue, arch: str, capability: str, level: Level) -> None:
    assert _level(catalogue, _amd(arch), capability) is level


@pytest.mark.parametrize(("arch", "has_fp64", "flash", "tf32", "bf16", "fp64"), [
    # data centre: Max 1550 (pvc); client: Arc B (bmg), Lunar Lake (lnl), Arc A (acm), Meteor
    # Lake iGPU (mtl). flash: xpu mha_fwd architectures pvc/pvc_vg/bmg_g21/bmg_g31
    ("pvc", True, N, N, N, N), ("bmg", True, N, N, N, N), ("lnl", False, U, N, N, U),
    ("acm", False, U, U, N, U), ("mtl", False, U, U, E, U),
])
def test_intel_data_centre_and_client_gpus(catalogue: Catalogue, arch: str, has_fp64: bool,
                                           flash: Level, tf32: Level, bf16: Level,
                                           fp64: Level) -> None:
    identity = _intel(arch, has_fp64=has_fp64)
    assert [_level(catalogue, identity, c) for c in
            ("attention.flash", "dtype.tf32", "dtype.bf16", "dtype.fp64")] == [flash, tf32, bf16, fp64]
    assert _level(catalogue, identity, "dtype.fp8_e4m3fn") is E
    assert _level(catalogue, identity, "mm.int8") is N


def test_missing_facts_leave_the_answer_to_the_probe(catalogue: Catalogue) -> None:
    # An Intel GPU whose backend could not report has_fp64: no fp64 verdict rather than a guess.
    xpu = DeviceIdentity(type="xpu", index=0, vendor="intel", name="Arc", arch="acm",
                         facts={"xe_generation": 1})
    verdicts = classify(catalogue, xpu)
    assert "dtype.fp64" not in verdicts
    assert verdicts["attention.flash"].level is U
    unknown_arch = DeviceIdentity(type="xpu", index=0, vendor="intel", name="GPU", arch="unknown")
    assert "attention.flash" not in classify(catalogue, unknown_arch)
    assert "dtype.tf32" not in classify(catalogue, unknown_arch)


@pytest.mark.parametrize(("isa", "fp16", "bf16", "fnuz"), [
    # mkldnn Utils.h mkldnn_fp16_device_check (avx512_fp16 / amx_fp16); AVX512_BF16 / AMX-BF16;
    # fnuz: rowwise scales take Blas.cpp's fp32-upcast path on every CPU (oneDNN only refuses
    # tensorwise fnuz), so it is emulated with AMX-FP16 too
    (("avx2", "avx512", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_int8", "amx_fp16"), N, N, E),
    (("avx2", "avx512", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_int8"), N, N, E),
    (("avx2", "avx512", "avx512_fp16"), N, E, E),  # avx512_fp16 without AMX
    (("avx2", "avx512", "avx512_bf16"), E, N, E),  # avx512_bf16 without AMX (Zen 4)
    (("avx2", "avx512"), E, E, E), (("avx2",), E, E, E),
    (("neon", "sve", "arm_fp16", "arm_bf16"), N, N, E), (("neon",), E, E, E),
])
def test_cpus_with_and_without_amx_avx512_fp16_avx512_bf16(
        catalogue: Catalogue, isa: tuple[str, ...], fp16: Level, bf16: Level, fnuz: Level) -> None:
    identity = _cpu(*isa)
    assert _level(catalogue, identity, "dtype.fp16") is fp16
    assert _level(catalogue, identity, "dtype.bf16") is bf16
    assert _level(catalogue, identity, "dtype.fp8_e4m3fnuz") is fnuz


def test_arm_features_are_unknown_where_the_backend_cannot_read_them(catalogue: Catalogue) -> None:
    verdict = classify(catalogue, _cpu("neon", platform="darwin"))["dtype.bf16"]
    assert verdict.level is K and "decides" in verdict.reason


@pytest.mark.parametrize(("isa", "capability", "platform", "level"), [
    # common_device_type.py IS_FLEX_ATTENTION_CPU_PLATFORM_SUPPORTED: avx2, not macOS, not default
    (("avx2",), "AVX2", "linux", N), (("avx2",), "DEFAULT", "linux", U),
    (("avx2",), "AVX2", "darwin", U), (("neon",), "NEON", "linux", U),
])
def test_cpu_flex_attention(catalogue: Catalogue, isa: tuple[str, ...], capability: str,
                            platform: str, level: Level) -> None:
    identity = _cpu(*isa, capability=capability, platform=platform)
    assert _level(catalogue, identity, "attention.flex") is level


@pytest.mark.parametrize(("generation", "macos", "bf16"), [
    # OperationUtils.mm: bf16 on MPS needs macOS 14; Metal bfloat from Apple8 (M2)
    (1, "14.5", E), (2, "14.0", N), (3, "14.4", N), (4, "15.1", N), (3, "13.6", U),
])
def test_apple_m_series(catalogue: Catalogue, generation: int, macos: str, bf16: Level) -> None:
    assert _level(catalogue, _apple(generation, macos), "dtype.bf16") is bf16
    assert _level(catalogue, _apple(generation, macos), "dtype.fp64") is U


@pytest.mark.parametrize(("generation", "fp16", "fp8"), [
    # Gaudi PyTorch Support Matrix: Float16, Float8 from Gaudi 2; torch._scaled_mm on HPU is
    # the Habana bridge's to register, so the probe decides it
    (1, U, U), (2, N, K), (3, N, K),
])
def test_gaudi_generations(catalogue: Catalogue, generation: int, fp16: Level, fp8: Level) -> None:
    assert _level(catalogue, _gaudi(generation), "dtype.fp16") is fp16
    assert _level(catalogue, _gaudi(generation), "dtype.fp8_e4m3fn") is fp8
    assert _level(catalogue, _gaudi(generation), "dtype.fp64") is U
