"""The dtypes ``scaled_mm`` takes, and the check of its fp32-bound operands (bias, epilogue)."""

from __future__ import annotations

import torch

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz)
WIDE_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
INPUT_DTYPES = FP8_DTYPES + WIDE_DTYPES
OUT_DTYPES = WIDE_DTYPES


def refuse_fp8_operand(what: str, t: torch.Tensor) -> None:
    """Raise ``TypeError`` for an fp8 ``bias`` or epilogue operand.

    ``is_floating_point()`` is true for fp8, but an fp8 addend or factor has no meaning without
    its own scale, and the backends would disagree about it (torch refuses to promote fp8,
    Triton's interpreter cannot cast it, oneDNN would read it): every backend refuses it here
    instead, before any work starts.
    """
    if t.dtype in FP8_DTYPES:
        raise TypeError(f"{what} must not be fp8, got {t.dtype}: fp8 is taken only for a and b "
                        f"(with scale_a / scale_b); upcast it first, e.g. t.float() * its scale")
