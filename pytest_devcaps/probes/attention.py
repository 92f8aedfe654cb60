"""SDPA backend probes: one call under a single ``sdpa_kernel(SDPBackend.X)``."""

from __future__ import annotations

import warnings

from pytest_devcaps.model import ProbeOutcome
from pytest_devcaps.probes.base import MAX_MESSAGE, ran, refused, unknown, unsupported

# Fused kernels differ in the dtypes they take (GPU flash wants half precision, CPU takes all).
_DTYPES = ("float16", "bfloat16", "float32")


def _sdpa(device: str, backend_name: str) -> ProbeOutcome:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, backend_name, None)
    if backend is None:
        return unsupported(f"torch {torch.__version__} has no SDPBackend.{backend_name}")
    what = f"scaled_dot_product_attention under SDPBackend.{backend_name}"
    first_error: BaseException | None = None
    first_warning = ""
    for dtype_name in _DTYPES:
        caught: list[warnings.WarningMessage] = []
        try:
            q = torch.randn(1, 2, 16, 64, device=device, dtype=getattr(torch, dtype_name))
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                with sdpa_kernel(backend):
                    out = F.scaled_dot_product_attention(q, q, q)
            finite = bool(torch.isfinite(out).all().item())
        except Exception as exc:
            if first_error is None:
                first_error = exc
                # torch explains why a fused kernel was rejected in warnings; keep the first
                first_warning = next((str(w.message).strip().splitlines()[0]
                                      for w in caught if str(w.message).strip()), "")
            continue
        if not finite:
            return unknown(f"{what} ({dtype_name}) returned non-finite values")
        return ran(f"{what} ran with {dtype_name} on {device}")
    assert first_error is not None
    outcome = refused(what, first_error)
    if first_warning:
        hint = first_warning[:MAX_MESSAGE]
        outcome = unsupported(f"{outcome.reason} (torch warned: {hint})")
    return outcome


def probe_flash(device: str) -> ProbeOutcome:
    return _sdpa(device, "FLASH_ATTENTION")


def probe_mem_efficient(device: str) -> ProbeOutcome:
    return _sdpa(device, "EFFICIENT_ATTENTION")


def probe_cudnn(device: str) -> ProbeOutcome:
    return _sdpa(device, "CUDNN_ATTENTION")
