"""Matmul probes: fp8 ``torch._scaled_mm`` (tensorwise, rowwise) and int8 ``torch._int_mm``."""

from __future__ import annotations

from pytest_devcaps.model import ProbeOutcome
from pytest_devcaps.probes.base import ran, refused, unknown, unsupported

# e4m3fn is the OCP format; fnuz is what some accelerators (e.g. gfx942) implement instead.
_FP8_INPUTS = ("float8_e4m3fn", "float8_e4m3fnuz")
_N = 16


def _scaled_mm(device: str, *, rowwise: bool) -> ProbeOutcome:
    import torch

    if not hasattr(torch, "_scaled_mm"):
        return unsupported(f"torch {torch.__version__} has no torch._scaled_mm")
    scaling = "rowwise" if rowwise else "tensorwise"
    first_error: BaseException | None = None
    for dtype_name in _FP8_INPUTS:
        dtype = getattr(torch, dtype_name, None)
        if dtype is None:
            continue
        try:
            eye = torch.eye(_N, device=device)
            a = eye.to(dtype)
            b = (2 * eye).to(dtype).t()  # mat2 column-major, as _scaled_mm requires on GPUs
            if rowwise:
                scale_a = torch.ones(_N, 1, device=device)
                scale_b = torch.ones(1, _N, device=device)
            else:
                scale_a = torch.tensor(1.0, device=device)
                scale_b = torch.tensor(1.0, device=device)
            out = torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b,
                                   out_dtype=torch.bfloat16)
            correct = bool(torch.equal(out.float().cpu(), 2 * torch.eye(_N)))
        except Exception as exc:
            first_error = first_error or exc
            continue
        if not correct:
            return unknown(f"{scaling} _scaled_mm ({dtype_name}) ran but gave a wrong result")
        return ran(f"{scaling} _scaled_mm ran with {dtype_name} inputs on {device}")
    if first_error is None:
        return unsupported(f"torch {torch.__version__} has no fp8 dtypes")
    return refused(f"{scaling} _scaled_mm", first_error)


def probe_scaled_mm(device: str) -> ProbeOutcome:
    return _scaled_mm(device, rowwise=False)


def probe_scaled_mm_rowwise(device: str) -> ProbeOutcome:
    return _scaled_mm(device, rowwise=True)


def probe_int_mm(device: str) -> ProbeOutcome:
    import torch

    if not hasattr(torch, "_int_mm"):
        return unsupported(f"torch {torch.__version__} has no torch._int_mm")
    try:
        a = torch.ones(32, 32, dtype=torch.int8, device=device)  # _int_mm wants M > 16, K % 8 == 0
        out = torch._int_mm(a, a.t().contiguous().t())
        value, out_dtype = out[0, 0].item(), out.dtype
    except Exception as exc:
        return refused("_int_mm", exc)
    if value != 32 or out_dtype != torch.int32:
        return unknown(f"_int_mm gave {value} ({out_dtype}), expected 32 (torch.int32)")
    return ran(f"_int_mm (int8 x int8 -> int32) ran on {device}")
