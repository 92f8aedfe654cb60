"""Dtype probes: a tiny computation in the dtype on the device (fp8/fp4: a scaled GEMM)."""

from __future__ import annotations

from pytest_devcaps.model import ProbeOutcome
from pytest_devcaps.probes import matmul, rule_gate
from pytest_devcaps.probes.base import device_type, ran, refused, unknown, unsupported


def _matmul_add(device: str, dtype_name: str) -> ProbeOutcome:
    import torch

    dtype = getattr(torch, dtype_name)
    try:
        ones = torch.ones(4, 4, dtype=dtype, device=device)
        value = (ones @ ones + ones)[0, 0].item()
    except Exception as exc:
        return refused(f"{dtype_name} matmul", exc)
    if value != 5:
        return unknown(f"{dtype_name} matmul + add gave {value}, expected 5")
    return ran(f"{dtype_name} matmul + add ran on {device}")


def probe_fp64(device: str) -> ProbeOutcome:
    return _matmul_add(device, "float64")


def probe_fp16(device: str) -> ProbeOutcome:
    return _matmul_add(device, "float16")


def probe_bf16(device: str) -> ProbeOutcome:
    return _matmul_add(device, "bfloat16")


def probe_tf32(device: str) -> ProbeOutcome:
    """Does float32 matmul round its inputs under ``set_float32_matmul_precision("high")``?

    1 + 2**-12 is exact in fp32 but rounds to 1.0 in tf32 (10 mantissa bits), so a matmul of
    such values against ones shows whether a reduced-precision path was taken.
    """
    import torch

    n = 64
    exact = n * (1 + 2**-12)
    previous = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("high")
        a = torch.full((n, n), 1 + 2**-12, device=device)
        b = torch.ones(n, n, device=device)
        value = (a @ b)[0, 0].item()
    except Exception as exc:
        return refused("float32 matmul under float32_matmul_precision('high')", exc)
    finally:
        torch.set_float32_matmul_precision(previous)
    if value == exact:
        return unsupported(
            f"no tf32 path: {device_type(device)} float32 matmul stays fp32 under "
            "float32_matmul_precision('high')"
        )
    if value == n:
        return ran("float32 matmul rounds inputs to tf32 under float32_matmul_precision('high')")
    return ran(f"float32 matmul takes a reduced-precision path under precision 'high' "
               f"(got {value}, fp32 gives {exact})")


# fp8 and fp4 mean matrix arithmetic in the format (capabilities.yaml), the same question the
# vendor rules answer: a probe that only cast and round-tripped would say "ran" on an A100,
# which stores fp8 but cannot multiply it.

def probe_fp8_e4m3fn(device: str) -> ProbeOutcome:
    return rule_gate.judged("dtype.fp8_e4m3fn", device, matmul.fp8_format(device, "float8_e4m3fn"))


def probe_fp8_e5m2(device: str) -> ProbeOutcome:
    return rule_gate.judged("dtype.fp8_e5m2", device, matmul.fp8_format(device, "float8_e5m2"))


def probe_fp8_e4m3fnuz(device: str) -> ProbeOutcome:
    return rule_gate.judged("dtype.fp8_e4m3fnuz", device, matmul.fp8_format(device, "float8_e4m3fnuz"))


def probe_fp8_e5m2fnuz(device: str) -> ProbeOutcome:
    return rule_gate.judged("dtype.fp8_e5m2fnuz", device, matmul.fp8_format(device, "float8_e5m2fnuz"))


def probe_fp4_e2m1(device: str) -> ProbeOutcome:
    """float4_e2m1fn_x2 arithmetic: PyTorch multiplies fp4 only in block-scaled _scaled_mm."""
    return rule_gate.judged("dtype.fp4_e2m1", device, matmul.block_scaled(device, fp4=True))
