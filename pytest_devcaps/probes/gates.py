"""PyTorch 2.13's own gates for the low-precision GEMMs and FlexAttention, decided from device facts.

A gate answers "does PyTorch let this through on this device?" from the same facts the vendor
rules see (:meth:`DeviceIdentity.rule_facts`): ``allowed`` is True, False, or None where PyTorch
states no gate for the device (then only running the op can tell). Each gate cites the PyTorch
function it mirrors. Probes read the live device's facts (:func:`live_facts`, from the backends,
the one source of facts), run the op, and explain a refusal with the gate; tests feed the gates
every shipped profile's facts and check that they agree with the vendor rules, so a probe on
real hardware and the rule for the same device cannot silently tell different stories.
Never imports torch itself (only the backends :func:`live_facts` asks do).

Note (one source of truth, not done yet): these gates restate what the vendor rules in
capabilities.yaml say; tests/config/test_config_classify.py keeps them consistent, but a gate
answers only "allowed" while a rule answers a level and a reason. A probe could instead read the
rule verdict for its live device (``classify(load_catalogue(), identity)``) and judge its outcome
against that, which would leave the YAML as the one source; it needs the catalogue loaded in the
probe child (and the verdict's level mapped onto "allowed"), so it is left for the architecture
task.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from pytest_devcaps.config.expressions import as_version
from pytest_devcaps.model import DeviceIdentity, Level, ProbeOutcome

OCP_FP8 = ("float8_e4m3fn", "float8_e5m2")
FNUZ_FP8 = ("float8_e4m3fnuz", "float8_e5m2fnuz")
Facts = Mapping[str, Any]


@dataclass(frozen=True)
class Gate:
    """PyTorch's verdict for one op on one device: ``allowed`` (None: no gate) and why."""

    allowed: bool | None
    reason: str


def _at_least(version: Any, minimum: str) -> bool | None:
    """``version >= minimum`` as versions (the rules' comparison); None when ``version`` is
    missing or not one."""
    have, want = as_version(version), as_version(minimum)
    if have is None or want is None:
        return None
    return have >= want


def _sm(facts: Facts) -> tuple[int, int] | None:
    """(major, minor) from the ``compute_capability`` fact (``8.9`` -> ``(8, 9)``)."""
    capability = facts.get("compute_capability")
    if not isinstance(capability, (int, float)) or isinstance(capability, bool):
        return None
    sm = round(float(capability) * 10)
    return sm // 10, sm % 10


def _no_gate(facts: Facts, what: str) -> Gate:
    return Gate(None, f"PyTorch states no {what} gate for {facts.get('vendor')} "
                      f"{facts.get('type')}: only running it can tell")


# --- torch._scaled_mm: which fp8 formats and scalings a device accepts ---------------------

def _nvidia_scaled_mm(facts: Facts) -> Gate:
    sm = _sm(facts)
    if sm is None:
        return Gate(None, "no compute_capability fact")
    allowed = sm[0] >= 9 or sm == (8, 9)
    # ScaledBlasDeviceUtils.cpp scaled_mm_arch_allowed: major >= 9 or sm_89
    return Gate(allowed, f"torch._scaled_mm needs sm_89 or sm_90+ "
                         f"(scaled_mm_arch_allowed); found sm_{sm[0]}{sm[1]}")


def _amd_fp8_formats(facts: Facts) -> tuple[set[str], str] | None:
    """The fp8 formats torch._scaled_mm takes on this AMD GPU, or None when a fact is missing.

    ScaledBlasDeviceUtils.cpp scaled_mm_arch_allowed (ROCm: gfx942; gfx1200/1201 from ROCm
    6.3; gfx950 from 6.5), ScaledBlas.cpp _scaled_mm_is_fnuz (gfx942 takes fnuz) and
    _scaled_mm_out_cuda ('Float8_e4m3fn is only supported for ROCm 6.5 and above').
    """
    arch = facts.get("arch")
    if arch == "gfx942":
        return set(FNUZ_FP8), "gfx942 takes the fnuz fp8 formats"
    if arch in ("gfx950", "gfx1200", "gfx1201"):
        recent = _at_least(facts.get("rocm_version"), "6.5")
        if recent is None:
            return None
        found = f"{arch} with ROCm {facts.get('rocm_version')}"
        return (set(OCP_FP8), f"{found} takes OCP fp8") if recent else \
            (set(), f"OCP fp8 on {arch} needs ROCm 6.5+; found {found}")
    return set(), f"torch._scaled_mm on ROCm needs gfx942, gfx950 or gfx1200/gfx1201; found {arch}"


def _cpu_fnuz(facts: Facts) -> Gate:
    isa = facts.get("isa") or ()
    # Blas.cpp _scaled_mm_out_cpu: only single-element scales go to oneDNN (mkldnn_scaled_mm,
    # whose get_mkldnn_dtype has no fnuz types: same dtypes with amx_int8, mixed with amx_fp16);
    # rowwise scales always take the fp32-upcast path, which takes any fp8 format.
    if "amx_int8" in isa:
        return Gate(True, "rowwise-scaled fnuz takes the fp32-upcast _scaled_mm; tensorwise fnuz "
                          "goes to oneDNN on AMX-INT8, which has no fnuz types")
    return Gate(True, "the fp32-upcast _scaled_mm takes fnuz fp8")


def fp8_gate(facts: Facts, dtype: str) -> Gate:
    """Does torch._scaled_mm take fp8 format ``dtype`` (``float8_e4m3fn``...) on this device?"""
    vendor = facts.get("vendor")
    fnuz = dtype in FNUZ_FP8
    if vendor == "nvidia":
        if fnuz:  # cuBLASLt has no fnuz types; ScaledBlas.cpp _scaled_mm_is_fnuz is ROCm-only
            return Gate(False, "fnuz fp8 is an AMD gfx942 format; cuBLASLt has no fnuz types")
        return _nvidia_scaled_mm(facts)
    if vendor == "amd":
        if fnuz:  # ScaledBlas.cpp _scaled_mm_is_fnuz: gfx942 only, whatever the ROCm version
            return Gate(facts.get("arch") == "gfx942",
                        f"fnuz fp8 is gfx942's format; found {facts.get('arch')}")
        formats = _amd_fp8_formats(facts)
        if formats is None:
            return Gate(None, "no rocm_version fact")
        return Gate(dtype in formats[0], formats[1])
    if vendor == "intel":  # oneDNN: f8_e4m3 and f8_e5m2, no fnuz
        return Gate(not fnuz, "oneDNN has no fnuz fp8 types" if fnuz else
                    "torch._scaled_mm on XPU (oneDNN) takes OCP fp8")
    if vendor == "cpu":
        return _cpu_fnuz(facts) if fnuz else Gate(True, "the CPU torch._scaled_mm takes OCP fp8")
    if vendor == "apple":  # native_functions.yaml _scaled_mm: CPU, CUDA, XPU
        return Gate(False, "torch._scaled_mm has no MPS kernel and MPS has no float8 types")
    if vendor == "habana":
        return _habana(facts, fnuz_refused=fnuz)
    return _no_gate(facts, "fp8")


def _habana(facts: Facts, *, fnuz_refused: bool = False) -> Gate:
    if fnuz_refused:
        return Gate(False, "Gaudi's fp8 formats are E4M3 and E5M2, not fnuz")
    generation = facts.get("gaudi_generation")
    if generation == 1:
        return Gate(False, "fp8 needs Gaudi 2+")
    return _no_gate(facts, "torch._scaled_mm")


def scaled_mm_gate(facts: Facts) -> Gate:
    """Tensorwise torch._scaled_mm in any fp8 format the device takes (PLATFORM_SUPPORTS_FP8)."""
    vendor = facts.get("vendor")
    if vendor == "amd":
        formats = _amd_fp8_formats(facts)
        if formats is None:
            return Gate(None, "no rocm_version fact")
        return Gate(bool(formats[0]), formats[1])
    return fp8_gate(facts, "float8_e4m3fn")


def rowwise_gate(facts: Facts) -> Gate:
    """torch._scaled_mm with rowwise scales ([M, 1] and [1, N])."""
    vendor = facts.get("vendor")
    if vendor == "nvidia":
        return _nvidia_rowwise(facts)
    if vendor in ("intel", "cpu"):  # oneDNN / the fp32-upcast fallback take rowwise scales
        return Gate(True, f"torch._scaled_mm on {facts.get('type')} takes rowwise scales")
    return scaled_mm_gate(facts)  # ROCm: hipBLASLt rowwise wherever _scaled_mm runs


def _nvidia_rowwise(facts: Facts) -> Gate:
    sm = _sm(facts)
    if sm is None:
        return Gate(None, "no compute_capability fact")
    found = f"sm_{sm[0]}{sm[1]} on {facts.get('platform')}"
    if facts.get("platform") == "win32":
        # RowwiseScaledMM.cu builds no CUTLASS kernel on _WIN32; ScaledBlas.cpp takes cuBLAS
        # rowwise for major 9 with CUBLAS_VERSION >= 120900
        cublas = sm[0] == 9 and _at_least(facts.get("cuda_version"), "12.9")
        return Gate(bool(cublas), f"on Windows only cuBLAS rowwise (sm_90, CUDA 12.9+) exists; "
                                  f"found {found}, CUDA {facts.get('cuda_version')}")
    # RowwiseScaledMM.cu dispatch_fp8_rowwise_kernel_on_sm: sm89, sm9x, sm10x, sm11x, sm12x
    allowed = sm == (8, 9) or 9 <= sm[0] <= 12
    return Gate(allowed, f"the rowwise fp8 kernels cover sm_89 and sm_90..sm_12x; found {found}")


def block_scaled_gate(facts: Facts) -> Gate:
    """Block-scaled torch._scaled_mm (MXFP8/MXFP4 e8m0 scales, NVFP4), fp4 included."""
    vendor = facts.get("vendor")
    if vendor == "nvidia":
        sm = _sm(facts)
        if sm is None:
            return Gate(None, "no compute_capability fact")
        if sm[0] < 10:  # common_cuda.py evaluate_platform_supports_mx_gemm: SM100OrLater
            return Gate(False, f"block-scaled GEMM needs sm_100+; found sm_{sm[0]}{sm[1]}")
        recent = _at_least(facts.get("cuda_version"), "12.8")  # cuBLASLt block scaling
        if recent is None:
            return Gate(None, "no cuda_version fact")
        return Gate(recent, f"block-scaled GEMM needs CUDA 12.8+; found {facts.get('cuda_version')}")
    if vendor == "amd":  # evaluate_platform_supports_mx_gemm: ROCm >= 7.0 and gfx950
        if facts.get("arch") != "gfx950":
            return Gate(False, f"block-scaled GEMM on ROCm needs gfx950; found {facts.get('arch')}")
        recent = _at_least(facts.get("rocm_version"), "7.0")
        if recent is None:
            return Gate(None, "no rocm_version fact")
        return Gate(recent, f"block-scaled GEMM on gfx950 needs ROCm 7.0+; found "
                            f"{facts.get('rocm_version')}")
    if vendor in ("intel", "cpu", "apple", "habana"):
        return Gate(False, "PyTorch's block-scaled GEMM is CUDA sm_100+ and ROCm gfx950 only")
    return _no_gate(facts, "block-scaled GEMM")


def flex_gate(facts: Facts) -> Gate:
    """FlexAttention, as torch/testing/_internal/common_device_type.py IS_FLEX_ATTENTION_*."""
    vendor = facts.get("vendor")
    if vendor == "cpu":  # IS_FLEX_ATTENTION_CPU_PLATFORM_SUPPORTED / flex_cpu check_cpu_supported
        isa = facts.get("isa") or ()
        ok = ("avx2" in isa and str(facts.get("cpu_capability")).upper() != "DEFAULT"
              and facts.get("platform") != "darwin")
        return Gate(ok, f"the C++ FlexAttention template needs AVX2 off macOS; found isa {list(isa)}")
    if vendor == "nvidia":  # IS_FLEX_ATTENTION_CUDA_PLATFORM_SUPPORTED: capability >= (8, 0)
        sm = _sm(facts)
        if sm is None:
            return Gate(None, "no compute_capability fact")
        return Gate(sm[0] >= 8, f"FlexAttention needs sm_80+; found sm_{sm[0]}{sm[1]}")
    if vendor in ("amd", "intel", "apple"):  # ROCm capability >= (9, 0); XPU with Triton; MPS
        return Gate(True, f"PyTorch supports FlexAttention on {vendor} {facts.get('type')}")
    return _no_gate(facts, "FlexAttention")


def judge(gate: Gate, outcome: ProbeOutcome) -> ProbeOutcome:
    """A probe's outcome read against PyTorch's gate: a refusal says which check refused, and an
    op that ran where PyTorch 2.13 would refuse it says so (the evidence still wins)."""
    if outcome.level is Level.UNSUPPORTED and gate.allowed is False:
        return ProbeOutcome(Level.UNSUPPORTED, f"{gate.reason} ({outcome.reason})")
    if outcome.level.available and gate.allowed is False:
        return ProbeOutcome(outcome.level, f"{outcome.reason}, although PyTorch 2.13's check "
                                           f"refuses it here: {gate.reason}")
    return outcome


#: Gate per capability, for the probes and for the tests that compare gates with rules.
GATES: Mapping[str, Callable[[Facts], Gate]] = {
    "dtype.fp8_e4m3fn": functools.partial(fp8_gate, dtype="float8_e4m3fn"),
    "dtype.fp8_e5m2": functools.partial(fp8_gate, dtype="float8_e5m2"),
    "dtype.fp8_e4m3fnuz": functools.partial(fp8_gate, dtype="float8_e4m3fnuz"),
    "dtype.fp8_e5m2fnuz": functools.partial(fp8_gate, dtype="float8_e5m2fnuz"),
    "dtype.fp4_e2m1": block_scaled_gate,
    "mm.scaled": scaled_mm_gate,
    "mm.scaled_rowwise": rowwise_gate,
    "mm.scaled_mx": block_scaled_gate,
    "attention.flex": flex_gate,
}


@functools.lru_cache(maxsize=None)
def _discovered(kind: str) -> tuple[DeviceIdentity, ...]:
    from pytest_devcaps.backends import builtin_backends, discover_devices

    return tuple(discover_devices([a for a in builtin_backends() if a.type == kind]))


def live_facts(device: str) -> dict[str, Any]:
    """The rule facts of the device this process runs a probe on (``{"type": ...}`` if unknown)."""
    kind, _, index = device.partition(":")
    for identity in _discovered(kind):
        if identity.key == device or (identity.type == kind and not index):
            return identity.rule_facts()
    return {"type": kind, "vendor": kind}
