"""The correctness items of the Triton-only paths, on the backends that run here by name
(``reference``, ``cpu``); triton_interpret_cases.py runs them on the Triton kernel."""

from __future__ import annotations

import pytest
import torch

from devcaps_kernels import Reduce, last_backend, scaled_mm
from devcaps_kernels import epilogue as ep
from devcaps_kernels.epilogue import DEFINITIONS, make
from pytest_devcaps.suites.kernels._checks import (FP32_ACCUMULATION_RTOL, accumulation_error, fresh,
                                                   huge_k_stride_views, large_k_fp8_operands)

CPU = torch.device("cpu")
BACKENDS = ["reference", "cpu"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fp8", [torch.float8_e4m3fn, torch.float8_e5m2], ids=str)
def test_large_k_fp8_accumulates_in_fp32(backend, fp8):
    a, b = large_k_fp8_operands(16, 64, 4096, dtype=fp8, device=CPU)
    scale_a, scale_b = torch.rand(16, 1) + 0.5, torch.rand(1, 64) + 0.5
    for kwargs in ({}, {"scale_a": scale_a, "scale_b": scale_b}):
        y, _ = scaled_mm(a, b, out_dtype=torch.float32, backend=backend, **kwargs)
        assert last_backend() == backend
        unscaled = y / (scale_a * scale_b) if kwargs else y
        assert accumulation_error(unscaled, a, b) <= FP32_ACCUMULATION_RTOL


@pytest.mark.parametrize("backend", BACKENDS)
def test_fast_accum_is_an_opt_in_within_bf16(backend):
    a = fresh(64, 256, dtype=torch.float32, device=CPU, scale=8.0).to(torch.float8_e4m3fn)
    b = fresh(256, 96, dtype=torch.float32, device=CPU, scale=8.0).to(torch.float8_e4m3fn)
    kwargs = dict(scale_a=torch.rand(64, 1) / 32, scale_b=torch.rand(1, 96) / 32,
                  bias=fresh(96, dtype=torch.bfloat16, device=CPU), epilogue=[ep.gelu(approximate="tanh")],
                  reductions=[Reduce("sum", group=32)])
    exact, (sums,) = scaled_mm(a, b, backend="reference", **kwargs)
    precise, _ = scaled_mm(a, b, backend=backend, **kwargs)
    fast, (fast_sums,) = scaled_mm(a, b, backend=backend, fast_accum=True, **kwargs)
    # default: the documented fp32 accumulator and one rounding (at most 1 ulp of summation order)
    assert (precise.float() - exact.float()).abs().max() <= exact.float().abs().max() * 2**-8
    torch.testing.assert_close(fast.float(), exact.float(), rtol=2e-2, atol=2e-2)  # ~1 more bf16 ulp
    torch.testing.assert_close(fast_sums, fast.float().view(64, 3, 32).sum(-1), rtol=1e-5, atol=1e-4)
    with pytest.raises(TypeError, match="fast_accum must be a bool, got int"):
        scaled_mm(a, b, backend=backend, fast_accum=1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_k_offsets_past_int32(backend):
    a, b = huge_k_stride_views(5, 16, 3, dtype=torch.float8_e4m3fn, device=CPU)
    y, (total,) = scaled_mm(a, b, out_dtype=torch.float32, reductions=[Reduce("sum")], backend=backend)
    exact = a.float() @ b.float()
    torch.testing.assert_close(y, exact, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(total, exact.sum(-1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fp8", [torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz], ids=str)
def test_fp8_bias_and_operands_are_refused(backend, fp8):
    a, b = fresh(6, 4, dtype=torch.bfloat16, device=CPU), fresh(4, 8, dtype=torch.bfloat16, device=CPU)
    t = torch.zeros(8).to(fp8)
    with pytest.raises(TypeError, match=r"bias must not be fp8"):
        scaled_mm(a, b, bias=t, backend=backend)
    for shape, kind in (((8,), "add"), ((6, 1), "mul"), ((6, 8), "add")):
        operand = torch.zeros(shape).to(fp8)
        with pytest.raises(TypeError, match=rf"epilogue\[0\] \({kind}\) operand must not be fp8"):
            scaled_mm(a, b, epilogue=[make(DEFINITIONS[kind], t=operand)], backend=backend)
        with pytest.raises(TypeError, match=rf"{kind}\(t\): t must not be fp8"):
            (ep.add if kind == "add" else ep.mul)(operand)
    # what the message suggests works, and means the same on every backend
    y, _ = scaled_mm(a, b, bias=t.float() * 0.5, epilogue=[ep.mul(t.float())], backend=backend)
    assert torch.equal(y, torch.zeros(6, 8, dtype=torch.bfloat16))
