"""Shared helpers of the kernel tests: fresh random inputs, the issue's tolerances, and the
float64 expectation every backend is checked against.

:func:`float64_expected` computes the documented semantics of ``scaled_mm`` on the CPU in
float64, with its own formulas for the built-in epilogue ops (not the kernels' torch
references), so a backend is never compared with the code that produced it: the ``reference``
backend (the only one on a device Triton does not drive, other than the CPU) is checked against
it like the fused ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import pytest
import torch

from devcaps_kernels import EpiOp, Reduce, last_backend, scaled_mm
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


# -- the float64 expectation ----------------------------------------------------------------------

def _gelu(x: torch.Tensor, approximate: str) -> torch.Tensor:
    if approximate == "tanh":
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


#: Independent float64 formulas of the built-in ops: ``(x, values) -> result``.
FLOAT64_OPS: dict[str, Callable[[torch.Tensor, dict[str, Any]], torch.Tensor]] = {
    "relu": lambda x, v: torch.where(x < 0, torch.zeros_like(x), x),
    "gelu": lambda x, v: _gelu(x, v["approximate"]),
    "silu": lambda x, v: x / (1 + torch.exp(-x)),
    "sigmoid": lambda x, v: 1 / (1 + torch.exp(-x)),
    "tanh": lambda x, v: torch.tanh(x),
    "add": lambda x, v: x + v["t"],
    "mul": lambda x, v: x * v["t"],
    "scale": lambda x, v: x * v["alpha"],
    "clamp": lambda x, v: torch.clamp(x, v["lo"], v["hi"]),
}


def _as_float64(value: object) -> object:
    return value.detach().cpu().double() if isinstance(value, torch.Tensor) else value


def apply_float64(x: torch.Tensor, op: EpiOp) -> torch.Tensor:
    """``op`` on the float64 block ``x``: the formula above for a built-in op, the op's own
    torch reference (run in float64) for an op defined elsewhere."""
    values = {name: _as_float64(value) for name, value in op.values}
    formula = FLOAT64_OPS.get(op.kind)
    if formula is not None:
        return formula(x, values)
    return op.definition.reference(x.clone(), **values)


@dataclass(frozen=True)
class Expected:
    """The float64 truth of one call: ``y64``, the value before the cast to ``out_dtype`` (what
    an fp32-source reduction reduces); :meth:`rounded` is ``y`` as the cast makes it."""

    y64: torch.Tensor

    def rounded(self, out_dtype: torch.dtype) -> torch.Tensor:
        return self.y64.to(out_dtype)


def float64_expected(a: torch.Tensor, b: torch.Tensor, scale_a: object = None, scale_b: object = None, *,
                     bias: torch.Tensor | None = None, epilogue: Sequence[EpiOp] = ()) -> Expected:
    """``scaled_mm``'s documented semantics in float64 on the CPU (scales, bias, ops in order);
    the cast and the reductions are the caller's (they depend on what the kernel returned)."""
    x = a.detach().cpu().double() @ b.detach().cpu().double()
    for s, shape in ((scale_a, (-1, 1)), (scale_b, (1, -1))):
        if isinstance(s, torch.Tensor):
            x = x * (s.detach().cpu().double().reshape(()) if s.numel() == 1 else s.detach().cpu().double().reshape(shape))
        elif s is not None:
            x = x * float(s)  # type: ignore[arg-type]
    if bias is not None:
        x = x + bias.detach().cpu().double()
    for op in epilogue:
        x = apply_float64(x, op)
    return Expected(x)


def record_backend(request: pytest.FixtureRequest, device: torch.device) -> str:
    """The backend of the last ``scaled_mm`` call, recorded on the test (the suite's summary
    lists which backend each device ran, see conftest.py)."""
    backend = last_backend()
    name = str(backend)
    request.node.user_properties.append(("devcaps_kernels_backend", f"{device}={name}"))
    return name


def checked_call(request: pytest.FixtureRequest, device: torch.device, a: torch.Tensor, b: torch.Tensor,
                 **kwargs: Any) -> tuple[torch.Tensor | None, tuple[torch.Tensor, ...], Expected, str]:
    """``scaled_mm`` on the device (``backend="auto"``), its backend recorded, y checked against
    the float64 expectation at the issue's tolerances; returns ``(y, reductions, expected,
    backend)`` for the caller's reduction checks."""
    y, reds = scaled_mm(a, b, **kwargs)
    backend = record_backend(request, device)
    scales = [kwargs.get("scale_a"), kwargs.get("scale_b")]
    expected = float64_expected(a, b, *scales, bias=kwargs.get("bias"), epilogue=kwargs.get("epilogue", ()))
    if y is not None:
        assert_y_close(y.cpu(), expected.rounded(y.dtype))
    return y, reds, expected, backend


def assert_fp32_source_close(got: torch.Tensor, expected: Expected, r: Reduce) -> None:
    """An fp32-source reduction against the same reduction of the float64 value before the
    cast (fp32 rounding of the accumulator and the epilogue: rtol 1e-4, atol 1e-4 x max)."""
    ref = reduce_rows(expected.y64, r)
    scale = float(ref[torch.isfinite(ref)].abs().max()) if torch.isfinite(ref).any() else 0.0
    torch.testing.assert_close(got.cpu().double(), ref, rtol=1e-4, atol=1e-4 * (scale + 1e-30), equal_nan=True)
