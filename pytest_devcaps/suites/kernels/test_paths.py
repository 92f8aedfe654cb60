"""Paths a small CPU test does not reach: large-K fp8 accumulation, K offsets past 2**31, and
the one refusal every backend shares (fp8 bias / epilogue operands).

On a GPU these run the compiled Triton kernel (``backend="auto"``); on CPU the ``cpu``
backend. The Triton interpreter runs the same checks in tests/kernels.
"""

from __future__ import annotations

import pytest
import torch

from devcaps_kernels import Reduce, last_backend, scaled_mm
from devcaps_kernels import epilogue as ep
from devcaps_kernels.epilogue import DEFINITIONS, make
from pytest_devcaps.suites.kernels._checks import (FP32_ACCUMULATION_RTOL, accumulation_error,
                                                   assert_y_close, float64_expected, fresh, huge_k_stride_views,
                                                   large_k_fp8_operands, record_backend)


@pytest.mark.requires_capability("dtype.fp8_e4m3fn", native=False)
@pytest.mark.parametrize("k", [4096, 8192])
def test_large_k_fp8_accumulates_in_fp32(request, device, k):
    a, b = large_k_fp8_operands(16, 64, k, dtype=torch.float8_e4m3fn, device=device)
    y, (total,) = scaled_mm(a, b, out_dtype=torch.float32, reductions=[Reduce("sum")])
    record_backend(request, device)
    error = accumulation_error(y, a, b)
    assert error <= FP32_ACCUMULATION_RTOL, f"{last_backend()!r}: relative error {error:.2e}"
    torch.testing.assert_close(total, y.sum(-1), rtol=1e-5, atol=0)
    fast, _ = scaled_mm(a, b, out_dtype=torch.float32, fast_accum=True)
    assert_y_close(fast.to(torch.bfloat16), y.to(torch.bfloat16))  # opted in: bf16-level only


@pytest.mark.requires_capability("dtype.fp8_e4m3fn", native=False)
@pytest.mark.requires_memory("16GiB")
def test_k_offsets_past_int32(request, device):
    a, b = huge_k_stride_views(5, 16, 3, dtype=torch.float8_e4m3fn, device=device)
    assert (a.shape[1] - 1) * a.stride(1) >= 2**31 and (b.shape[0] - 1) * b.stride(0) >= 2**31
    y, (total,) = scaled_mm(a, b, out_dtype=torch.float32, reductions=[Reduce("sum")])
    record_backend(request, device)
    exact = float64_expected(a, b).y64  # from small dense float64 copies
    torch.testing.assert_close(y.cpu().double(), exact, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(total.cpu().double(), exact.sum(-1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fp8", [torch.float8_e4m3fn, torch.float8_e5m2], ids=str)
def test_fp8_bias_and_operands_are_refused(device, fp8):
    a, b = fresh(6, 4, dtype=torch.float32, device=device), fresh(4, 8, dtype=torch.float32, device=device)
    t = torch.zeros(8, device=device).to(fp8)
    with pytest.raises(TypeError, match=r"bias must not be fp8, got torch.float8_e"):
        scaled_mm(a, b, bias=t)
    with pytest.raises(TypeError, match=r"add\(t\): t must not be fp8"):
        ep.add(t)
    for kind in ("add", "mul"):  # built without the constructor: build_problem refuses it too
        with pytest.raises(TypeError, match=rf"epilogue\[1\] \({kind}\) operand must not be fp8"):
            scaled_mm(a, b, epilogue=[ep.relu(), make(DEFINITIONS[kind], t=t)])
