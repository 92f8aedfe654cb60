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


#: Largest ``|y - a @ b| / (|a| @ |b|)`` (float64) an fp32 accumulator may show on
#: :func:`large_k_fp8_operands`. fp32 accumulation stays under ~1e-5 there, also when a
#: reduced-precision partial is promoted every BLOCK_K (Hopper with ``max_num_imprecise_acc``);
#: Hopper's default fast accumulation (a ~14-bit accumulator, emulated in
#: tests/kernels/test_accumulation_check.py) drops whole later chunks and shows ~4e-4.
FP32_ACCUMULATION_RTOL = 5e-5


def large_k_fp8_operands(m: int, n: int, k: int, *, dtype: torch.dtype,
                         device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """fp8 ``a [m, k]``, ``b [k, n]`` whose dot products start with one large 32-term block
    (448 * 448 * 32, about 2**22.6) followed by ``k - 32`` small positive products: each later
    32-term chunk (~18) is below half an ulp of a 14-bit accumulator (256) but far above half
    an ulp of fp32 (0.25), so imprecise accumulation loses them all and fp32 keeps them."""
    a = torch.rand(m, k, device=device) * 0.5 + 0.5
    b = torch.rand(k, n, device=device) * 0.5 + 0.5
    a[:, :32] = 448.0
    b[:32] = 448.0
    return a.to(dtype), b.to(dtype)


def accumulation_error(y: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> float:
    """``max |y - a @ b| / (|a| @ |b|)`` with the reference product in float64 (on the CPU:
    not every device has float64)."""
    a64, b64 = a.cpu().double(), b.cpu().double()
    exact, scale = a64 @ b64, a64.abs() @ b64.abs()
    return float(((y.cpu().double() - exact).abs() / scale.clamp_min(1e-300)).max())


def huge_k_stride_views(m: int, n: int, k: int, *, dtype: torch.dtype,
                        device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``a [m, k]`` and ``b [k, n]`` as strided views whose K stride is 2**30 + 64 elements, so
    ``(k - 1) * stride`` passes 2**31: int32 offsets would wrap. Each storage is ~2 GiB of
    ``dtype`` (1 byte for fp8) but only the viewed elements are written (on CPU the rest stays
    unbacked virtual memory)."""
    stride = (1 << 30) + 64
    a = torch.empty(stride * (k - 1) + m, dtype=dtype, device=device).as_strided((m, k), (1, stride))
    b = torch.empty(stride * (k - 1) + n, dtype=dtype, device=device).as_strided((k, n), (stride, 1))
    a.copy_(fresh(m, k, dtype=torch.float32, device=device, scale=4.0).to(dtype))
    b.copy_(fresh(k, n, dtype=torch.float32, device=device, scale=4.0).to(dtype))
    return a, b
