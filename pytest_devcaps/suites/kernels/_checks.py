"""Shared helpers of the kernel tests: fresh random inputs and the issue's tolerances."""

from __future__ import annotations

import torch

from devcaps_kernels import Reduce
from devcaps_kernels.reductions import prepare, reduce_rows

FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def fresh(*shape: int, dtype: torch.dtype, device: torch.device, scale: float = 1.0) -> torch.Tensor:
    """Fresh normal data (no fixed seed: every run sees new values), cast to ``dtype``."""
    return (torch.randn(shape, device=device) * scale).to(dtype)


def assert_y_close(y: torch.Tensor, ref: torch.Tensor) -> None:
    """bf16/fp16 outputs: atol=rtol=2e-2; fp32: 1e-3; and cosine similarity >= 0.999."""
    assert y.shape == ref.shape and y.dtype == ref.dtype, (y.shape, y.dtype, ref.shape, ref.dtype)
    tol = 1e-3 if y.dtype == torch.float32 else 2e-2
    torch.testing.assert_close(y.float(), ref.float(), atol=tol, rtol=tol, equal_nan=True)
    a, b = y.double().flatten(), ref.double().flatten()
    finite = torch.isfinite(a) & torch.isfinite(b)
    a, b = a[finite], b[finite]
    if a.numel() and a.norm() > 0 and b.norm() > 0:
        cosine = float(a @ b / (a.norm() * b.norm()))
        assert cosine >= 0.999, f"cosine similarity {cosine:.6f} < 0.999"


def assert_reduction_close(got: torch.Tensor, src: torch.Tensor, r: Reduce, *, rtol: float = 1e-5,
                           atol_per_term: float = 1e-6) -> None:
    """``got`` against ``r`` computed in fp64 from ``src`` (the kernel's own y or acc).

    atol scales with the group size and the largest term, as fp32 summation error does.
    """
    assert got.dtype == torch.float32
    expected = reduce_rows(src.double(), r)
    n = src.shape[1]
    terms = prepare(src.double(), r.kind)
    biggest = float(terms[torch.isfinite(terms)].abs().max()) if terms.numel() else 0.0
    atol = atol_per_term * r.group_size(n) * max(biggest, 1e-30)
    torch.testing.assert_close(got.double(), expected, rtol=rtol, atol=atol, equal_nan=True)
