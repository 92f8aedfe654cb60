"""Cases for the Triton kernel on CPU tensors under Triton's interpreter.

Not collected directly (no ``test_`` prefix): ``test_triton_interpret.py`` runs this module in
a fresh interpreter with TRITON_INTERPRET=1 set before triton is imported (triton's own
``@jit`` helpers are decorated at import). Shapes stay small: the interpreter is slow.
"""

from __future__ import annotations

import math
import os

import pytest
import torch

import devcaps_kernels.triton_backend as triton_backend
import devcaps_kernels.triton_plan as triton_plan
from devcaps_kernels import Reduce, last_backend, scaled_mm
from devcaps_kernels import epilogue as ep
from devcaps_kernels.epilogue import DEFINITIONS, make
from devcaps_kernels.problem import build_problem
from devcaps_kernels.triton_configs import TileConfig
from devcaps_kernels.triton_plan import KernelTarget
from pytest_devcaps.suites.kernels._checks import (FP32_ACCUMULATION_RTOL, accumulation_error,
                                                   assert_reduction_close, assert_y_close, fresh,
                                                   huge_k_stride_views, large_k_fp8_operands)

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("run through test_triton_interpret.py (needs TRITON_INTERPRET=1 before triton "
                "is imported)", allow_module_level=True)
pytest.importorskip("triton", reason="triton is not installed")
CPU = torch.device("cpu")
# Segments of gcd(group, BLOCK_N=64): 32 (in tile), 1, 32 + second pass, 16 x 3 tiles, 2, row.
REDUCTIONS = [Reduce("sum", group=32), Reduce("amax", group=3), Reduce("mean", group=96),
              Reduce("sumsq", group=48), Reduce("meansq", group=2, source="fp32"), Reduce("sum"),
              Reduce("amax", source="fp32")]


def triton_vs_reference(a, b, **kwargs):
    y, reds = scaled_mm(a, b, backend="triton", **kwargs)
    assert last_backend() == "triton"
    ref_y, ref_reds = scaled_mm(a, b, backend="reference", **kwargs)
    if y is not None:
        assert_y_close(y, ref_y)
    for r, got, ref in zip(kwargs.get("reductions", ()), reds, ref_reds):
        if r.source == "output" and y is not None:
            assert_reduction_close(got, y.float(), r)
        else:
            torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4 * (float(ref.abs().max()) + 1e-30))
    return y, reds


@pytest.mark.parametrize("in_dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_ragged_every_reduction_path(in_dtype):
    dtype = in_dtype
    m, n, k = 33, 96, 40
    a, b = fresh(m, k, dtype=dtype, device=CPU), fresh(k, n, dtype=dtype, device=CPU)
    triton_vs_reference(a, b, bias=fresh(n, dtype=dtype, device=CPU),
                        epilogue=[ep.gelu(approximate="tanh"), ep.mul(fresh(m, 1, dtype=dtype, device=CPU))],
                        reductions=REDUCTIONS)


@pytest.mark.parametrize("fp8", [torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz,
                                 torch.float8_e5m2fnuz, "mixed"], ids=str)
def test_fp8_rowwise_and_tensorwise(fp8):
    m, n, k = 17, 48, 72
    dta, dtb = (torch.float8_e4m3fn, torch.float8_e5m2) if fp8 == "mixed" else (fp8, fp8)
    a = fresh(m, k, dtype=torch.float32, device=CPU, scale=4.0).to(dta)
    b = fresh(k, n, dtype=torch.float32, device=CPU, scale=4.0).to(dtb)
    triton_vs_reference(a, b, scale_a=torch.rand(m, 1) / 16, scale_b=torch.rand(1, n) / 16,
                        bias=fresh(n, dtype=torch.bfloat16, device=CPU), out_dtype=torch.float32,
                        reductions=[Reduce("sumsq", group=16), Reduce("amax")])
    triton_vs_reference(a, b, scale_a=torch.tensor(0.05), scale_b=0.5, epilogue=[ep.silu()],
                        reductions=[Reduce("sum", group=8)])


def test_every_op_and_operand_form():
    m, n, k = 20, 40, 24
    a, b = fresh(m, k, dtype=torch.bfloat16, device=CPU), fresh(k, n, dtype=torch.bfloat16, device=CPU)
    ops = [ep.add(fresh(n, dtype=torch.float32, device=CPU)), ep.gelu(), ep.mul(fresh(m, 1, dtype=torch.float32, device=CPU)),
           ep.tanh(), ep.add(fresh(m, n, dtype=torch.bfloat16, device=CPU)), ep.sigmoid(),
           ep.mul(fresh(1, n, dtype=torch.float32, device=CPU)), ep.silu(), ep.add(torch.tensor(0.3)),
           ep.scale(3.0), ep.relu(), ep.clamp(0.2, 1.5), ep.add(-0.5), ep.mul(2.0),
           ep.clamp(lo=-0.9), ep.clamp(hi=0.9), ep.gelu(approximate="tanh")]
    triton_vs_reference(a, b, epilogue=ops, out_dtype=torch.float32,
                        reductions=[Reduce("mean", group=8)])


def test_store_output_false_k_zero_and_strides():
    m, n, k = 33, 64, 40
    a = fresh(k, m, dtype=torch.float16, device=CPU).t()
    b = fresh(n, 2 * k, dtype=torch.float16, device=CPU).t()[::2]
    reductions = [Reduce("sum"), Reduce("amax", group=16)]
    y, full = triton_vs_reference(a, b, reductions=reductions, epilogue=[ep.relu()])
    none, only = scaled_mm(a, b, reductions=reductions, epilogue=[ep.relu()], store_output=False,
                           backend="triton")
    assert none is None
    for got, want in zip(only, full):
        assert torch.equal(got, want)
    y0, (total,) = scaled_mm(torch.empty(5, 0), torch.empty(0, 16), reductions=[Reduce("sum")],
                             backend="triton")
    assert torch.equal(y0.float(), torch.zeros(5, 16)) and torch.equal(total, torch.zeros(5))


def test_nan_inf_propagate_and_deterministic():
    m, n, k = 9, 96, 24
    a, b = fresh(m, k, dtype=torch.float32, device=CPU), fresh(k, n, dtype=torch.float32, device=CPU)
    a[3, 5] = math.nan
    a[6, 0] = math.inf
    b[0] = b[0].abs() + 1
    reductions = [Reduce("sum", group=48), Reduce("amax"), Reduce("amax", group=3)]
    for op in (ep.relu(), ep.clamp(-1, 1), ep.gelu(approximate="tanh"), ep.tanh(), ep.sigmoid()):
        y, reds = scaled_mm(a, b, epilogue=[op], reductions=reductions, backend="triton")
        assert torch.isnan(y[3].float()).all(), op
        for got in reds:
            assert torch.isnan(got[3]).all() and not torch.isnan(got[:3]).any(), op
    y, (total, amax, _) = scaled_mm(a, b, out_dtype=torch.float32, reductions=reductions, backend="triton")
    assert torch.isposinf(y[6]).all() and torch.isposinf(total[6]).all() and torch.isposinf(amax[6])
    again_y, again_reds = scaled_mm(a, b, out_dtype=torch.float32, reductions=reductions,
                                    backend="triton")
    assert torch.equal(again_y.nan_to_num(), y.nan_to_num())
    for first, second in zip((total, amax, _), again_reds):  # no atomics: bitwise repeatable
        assert torch.equal(first.nan_to_num(), second.nan_to_num())


@pytest.mark.parametrize("fp8", [torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz,
                                 torch.float8_e5m2fnuz], ids=str)
def test_fp8_decode_every_code(fp8):
    codes = torch.arange(256, dtype=torch.uint8).view(256, 1).view(fp8)
    one = torch.ones(1, 1).to(fp8)
    y, _ = scaled_mm(codes, one, out_dtype=torch.float32, backend="triton")
    torch.testing.assert_close(y, codes.float(), rtol=0, atol=0, equal_nan=True)


# -- paths CI cannot compile: checked through the interpreter ---------------------------------

def test_large_k_fp8_accumulates_in_fp32_decoded():
    a, b = large_k_fp8_operands(4, 64, 4096, dtype=torch.float8_e4m3fn, device=CPU)
    y, _ = scaled_mm(a, b, out_dtype=torch.float32, backend="triton")
    assert accumulation_error(y, a, b) <= FP32_ACCUMULATION_RTOL


@pytest.mark.parametrize(("fast_accum", "expected"), [(False, {32}), (True, {0})])
def test_native_fp8_dot_asks_for_fp32_accumulation(monkeypatch, fast_accum, expected):
    """The native-fp8 kernel (as on sm_90, where Triton accumulates imprecisely by default)
    hands tl.dot max_num_imprecise_acc=BLOCK_K (32 here); with fast_accum=True it leaves
    Triton's default (0 under the interpreter). The interpreter computes both in fp32."""
    from triton.runtime import interpreter

    seen = []
    create_dot = interpreter.InterpreterBuilder.create_dot

    def spy(self, a, b, d, input_precision, max_num_imprecise_acc):
        seen.append(max_num_imprecise_acc)
        return create_dot(self, a, b, d, input_precision, max_num_imprecise_acc)

    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_dot", spy)
    sm90_like = KernelTarget("", None, frozenset({"fp8e4nv"}), True, None, interpret=True)
    monkeypatch.setattr(triton_backend, "target_of", lambda device: sm90_like)
    a, b = large_k_fp8_operands(4, 64, 4096, dtype=torch.float8_e4m3fn, device=CPU)
    y, _ = scaled_mm(a, b, out_dtype=torch.float32, backend="triton", fast_accum=fast_accum)
    assert set(seen) == expected and len(seen) == 4096 // 32
    assert accumulation_error(y, a, b) <= FP32_ACCUMULATION_RTOL


def test_k_offsets_past_int32():
    a, b = huge_k_stride_views(5, 16, 3, dtype=torch.float8_e4m3fn, device=CPU)
    y, (total,) = triton_vs_reference(a, b, out_dtype=torch.float32, reductions=[Reduce("sum")])
    torch.testing.assert_close(y, a.float() @ b.float(), rtol=1e-6, atol=1e-6)


def test_fp8_bias_and_operands_are_refused():
    a, b = fresh(6, 4, dtype=torch.bfloat16, device=CPU), fresh(4, 8, dtype=torch.bfloat16, device=CPU)
    t = torch.zeros(8).to(torch.float8_e4m3fn)
    with pytest.raises(TypeError, match=r"bias must not be fp8"):
        scaled_mm(a, b, bias=t, backend="triton")
    with pytest.raises(TypeError, match=r"epilogue\[0\] \(mul\) operand must not be fp8"):
        scaled_mm(a, b, epilogue=[make(DEFINITIONS["mul"], t=t)], backend="triton")


def test_reductions_do_not_depend_on_the_autotuned_block_n(monkeypatch):
    """Two configs with BLOCK_N 64 and 128 share segments of gcd(group, 64): run each alone
    and every reduction is bitwise the same (same BLOCK_K, so y is the same too)."""
    both = (TileConfig(32, 64, 32, 8, 4, 1), TileConfig(32, 128, 32, 8, 4, 1))
    monkeypatch.setattr(triton_plan, "tile_configs", lambda p, target, native: both)
    m, n, k = 17, 256, 24
    a, b = fresh(m, k, dtype=torch.float16, device=CPU), fresh(k, n, dtype=torch.float16, device=CPU)
    reductions = [Reduce("sum"), Reduce("sumsq", group=128), Reduce("amax", group=32)]
    results = []
    for block_n in (64, 128):
        monkeypatch.setattr(triton_backend, "prune_for_m",
                            lambda configs, named_args, bn=block_n, **kw: [c for c in configs
                                                                            if c.kwargs["BLOCK_N"] == bn])
        triton_backend._KERNELS.clear()
        results.append(triton_vs_reference(a, b, epilogue=[ep.silu()], reductions=reductions))
        assert triton_backend.plan(build_problem(a, b, None, None, None, torch.bfloat16, [],
                                                 reductions, True)).reductions[1][2] == 64
    (y64, r64), (y128, r128) = results
    assert torch.equal(y64, y128)
    for first, second in zip(r64, r128):
        assert torch.equal(first, second)


def test_ragged_last_group():
    m, n, k = 20, 100, 24
    a, b = fresh(m, k, dtype=torch.bfloat16, device=CPU), fresh(k, n, dtype=torch.bfloat16, device=CPU)
    # segments gcd(group, 64): 64 in tile, 16, 1, 64 + second pass over a padded pair, 8, 1
    reductions = [Reduce(kind, group=g, ragged=True, source=src) for kind, g, src in (
        ("sum", 64, "output"), ("mean", 48, "fp32"), ("amax", 3, "output"), ("sumsq", 128, "output"),
        ("meansq", 40, "fp32"), ("sum", 7, "output"))]
    y, reds = triton_vs_reference(a, b, epilogue=[ep.tanh()], reductions=reductions)
    assert [tuple(r.shape) for r in reds] == [(m, 2), (m, 3), (m, 34), (m, 1), (m, 3), (m, 15)]
