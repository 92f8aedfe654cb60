"""add / mul / scale run inside the CPU GEMM as oneDNN binary post-ops (issue 30 item 7: a bf16
GEMM with one of them after it had to take the fp32 GEMM, 1.7-2.2x the bf16 graph's time), and
only where that keeps the one rounding: oneDNN computes post-ops in f32 on the accumulator, but
takes ``other`` (and the bias) in the input's dtype, so the op's value must be exact there."""

from __future__ import annotations

import pytest
import torch

import devcaps_kernels.cpu_backend as cpu
from devcaps_kernels import Reduce, scaled_mm
from devcaps_kernels import epilogue as ep
from devcaps_kernels.problem import build_problem
from pytest_devcaps.suites.kernels._checks import float64_expected

M, N, K = 300, 96, 64
BF16 = torch.bfloat16


def _problem(ops, *, dtype=BF16, bias_dtype=BF16, scale_a=None, reductions=()):
    gen = torch.Generator().manual_seed(7)
    a, b = torch.randn(M, K, generator=gen).to(dtype), torch.randn(K, N, generator=gen).to(dtype)
    bias = None if bias_dtype is None else torch.randn(N, generator=gen).to(bias_dtype)
    return build_problem(a, b, scale_a, None, bias, dtype, ops, reductions, True)


@pytest.fixture
def fast_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan as on a CPU whose bf16 GEMM is fast and whose oneDNN runs the binary op (an
    AVX2 CPU has neither): the decisions below must not depend on the machine."""
    monkeypatch.setattr(cpu, "bf16_gemm_problem", lambda: "")
    monkeypatch.setattr(cpu, "onednn_problem", lambda dtype: "")
    monkeypatch.setattr(cpu, "onednn_binary_problem", lambda dtype: "")


@pytest.mark.parametrize(("op", "attr", "shape"), [
    (lambda: ep.add(torch.randn(N).to(BF16)), "add", (1, N)),
    (lambda: ep.add(torch.randn(1, N).to(BF16)), "add", (1, N)),
    (lambda: ep.mul(torch.rand(M, 1).to(BF16)), "mul", (M, N)),  # as its expanded view: see below
    (lambda: ep.add(torch.randn(M, N).to(BF16)), "add", (M, N)),
    (lambda: ep.add(torch.randn(N, M).to(BF16).t()), "add", (M, N)),  # a transposed operand
    (lambda: ep.add(torch.tensor(1.5, dtype=BF16)), "add", (1, 1)),
    (lambda: ep.add(2.0), "add", (1, 1)),
    (lambda: ep.scale(0.5), "mul", (1, 1)),
    (lambda: ep.add(float("nan")), "add", (1, 1)),
], ids=["row", "row-1xN", "col", "full", "full-transposed", "0-d", "number", "scale", "nan"])
def test_an_operand_exact_in_bf16_keeps_the_bf16_gemm_with_the_op_inside(fast_bf16, op, attr, shape):
    plan = cpu._make_plan(_problem([op(), ep.relu()]))
    assert plan.compute == BF16 and plan.gemm_is_output
    assert (plan.binary, tuple(plan.other.shape), plan.other.dtype) == (attr, shape, BF16)
    assert (plan.fused_ops, plan.on_output) == (1, 1)  # relu commutes with the rounding: on y


def test_a_column_operand_is_given_as_its_expanded_view(fast_bf16):
    """Given as [M, 1], oneDNN's per-row broadcast took ~1,000x the GEMM's time (1.8 s for a
    512^3 call, Zen 4, torch 2.13); the expanded [M, N] view (stride 0 along N, no copy) runs at
    the GEMM's speed. Shape and strides are what decide it."""
    col = torch.rand(M, 1).to(BF16)
    plan = cpu._make_plan(_problem([ep.mul(col)]))
    assert plan.other.stride() == (1, 0) and plan.other.data_ptr() == col.data_ptr()


@pytest.mark.parametrize(("ops", "inside", "why"), [
    ([ep.add(torch.randn(N))], False, "an fp32 operand: bf16 would round it"),
    ([ep.scale(0.1)], False, "0.1 in fp32 is no bf16 value"),
    ([ep.add(torch.randn(N).to(torch.float16))], False, "an fp16 operand"),
    ([ep.relu(), ep.add(torch.randn(N).to(BF16))], False, "not the first op"),
    ([ep.add(torch.randn(N).to(BF16)), ep.gelu()], True, "inside, but gelu would run after the rounding"),
])
def test_a_value_bf16_cannot_hold_or_an_op_after_it_takes_the_fp32_gemm(fast_bf16, ops, inside, why):
    p = _problem(ops)
    assert (cpu._onednn_binary(p, BF16) is not None) == inside, why
    assert cpu._plan_dtype(p) == torch.float32, why


def test_no_binary_op_with_an_fp32_bias_or_scales(fast_bf16):
    """The binary op takes a bias of the input's dtype only, and no scale: those keep the
    path that applies them in fp32."""
    op = ep.add(torch.randn(N).to(BF16))
    assert cpu._onednn_binary(_problem([op], bias_dtype=torch.float32), BF16) is None
    assert cpu._onednn_binary(_problem([op], scale_a=0.5), BF16) is None
    assert cpu._onednn_binary(_problem([op], bias_dtype=None), BF16) is not None


@pytest.mark.parametrize("dtype", [BF16, torch.float32])
@pytest.mark.parametrize("make", [
    lambda d: ep.add(torch.randn(M, N).to(d)),
    lambda d: ep.mul(torch.rand(M, 1).to(d) + 0.5),
    lambda d: ep.add(torch.randn(N).to(d)),
    lambda d: ep.scale(0.5),
], ids=["add-full", "mul-col", "add-row", "scale"])
def test_the_result_is_rounded_once(monkeypatch, dtype, make):
    """Against float64 rounded once: a bf16 GEMM rounded before the op, then the op, rounds
    twice and misses a share of the outputs by an ulp (checked below, so the check tells the
    two apart); with the op inside, only summation order (fp32 sums in another order than
    float64's) may move a value across a rounding boundary. Runs whatever the machine offers:
    where the bf16 GEMM is not the fast one (no bf16 units) or oneDNN runs no binary op, the
    plan takes the fp32 GEMM and applies the op itself, with the same result."""
    monkeypatch.setattr(cpu, "block_rows", lambda m, n, threads: 128)  # three blocks: [M, *] operands sliced
    gen = torch.Generator().manual_seed(11)
    a, b = torch.randn(M, K, generator=gen).to(dtype), torch.randn(K, N, generator=gen).to(dtype)
    bias = torch.randn(N, generator=gen).to(dtype)
    op = make(dtype)
    p = build_problem(a, b, None, None, bias, dtype, [op], [Reduce("sum")], True)
    plan = cpu._make_plan(p)
    # a bf16 GEMM where this machine has a fast one and oneDNN runs the binary op; after an fp32
    # GEMM the op runs on the block (a post-op is no faster there)
    assert plan.binary == ("" if plan.compute == torch.float32 else op.definition.onednn_binary(op))
    y, (total,) = scaled_mm(a, b, bias=bias, out_dtype=dtype, epilogue=[op], reductions=[Reduce("sum")],
                            backend="cpu")
    once = float64_expected(a, b, bias=bias, epilogue=[op]).rounded(dtype)
    torch.testing.assert_close(total, y.float().sum(-1), rtol=1e-5, atol=1e-3)
    if dtype == torch.float32:  # no second rounding to tell apart: fp32 sums, to a few ulps
        torch.testing.assert_close(y, once, rtol=1e-5, atol=1e-4)
        return
    missed = (y.float() != once.float()).float().mean().item()
    assert missed < 0.01, f"{missed:.2%} of the outputs differ from float64 rounded once"
    if op.kind != "scale":  # scale(0.5) commutes with the rounding: no contrast
        rounded_first = float64_expected(a, b, bias=bias).rounded(dtype).float()
        operands = {n: v.float() for n, v in op.operands() if isinstance(v, torch.Tensor)}
        twice = ep.apply_torch(rounded_first, op, operands).to(dtype)
        assert (twice.float() != once.float()).float().mean().item() > 5 * max(missed, 0.002)


def test_the_binary_check_runs_once_and_names_a_failure(monkeypatch):
    calls = []

    class Broken:
        def __call__(self, *args):  # the unary op still works
            return torch.ones(2, 2, dtype=args[0].dtype)

        def binary(self, *args):
            calls.append(args)
            raise RuntimeError("could not create a primitive descriptor\nmore detail")

    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", Broken())
    monkeypatch.setattr(cpu, "onednn_problem", lambda dtype: "")
    cpu.onednn_binary_problem.cache_clear()
    try:
        assert cpu.onednn_binary_problem(torch.float32) == (
            "torch.ops.mkldnn._linear_pointwise.binary fails for torch.float32: could not create a primitive descriptor")
        cpu.onednn_binary_problem(torch.float32)
        assert len(calls) == 1
        assert cpu._onednn_binary(_problem([ep.scale(0.5)], dtype=torch.float32, bias_dtype=None),
                                  torch.float32) is None
    finally:
        cpu.onednn_binary_problem.cache_clear()


def test_a_one_block_call_returns_the_gemm_output_as_y_a_new_tensor_each_time():
    """A call that is one block whose GEMM output is y returns that tensor (no copy into
    another): it must be the call's own, never an input or a buffer a later call reuses."""
    gen = torch.Generator().manual_seed(5)
    a, b = torch.randn(64, 32, generator=gen), torch.randn(32, 48, generator=gen)
    bias = torch.randn(48, generator=gen)
    kwargs = dict(bias=bias, out_dtype=torch.float32, epilogue=[ep.gelu()], reductions=[Reduce("sum")], backend="cpu")
    assert cpu._make_plan(build_problem(a, b, None, None, bias, torch.float32, [ep.gelu()], [Reduce("sum")],
                                        True)).gemm_is_output
    y1, (s1,) = scaled_mm(a, b, **kwargs)
    y2, _ = scaled_mm(a, b, **kwargs)
    inputs = {t.data_ptr() for t in (a, b, bias)}
    assert y1.data_ptr() not in inputs and y1.data_ptr() != y2.data_ptr()
    assert y1.is_contiguous() and y1.shape == (64, 48) and torch.equal(y1, y2)
    expected = float64_expected(a, b, bias=bias, epilogue=[ep.gelu()]).rounded(torch.float32)
    torch.testing.assert_close(y1, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(s1, y1.sum(-1), rtol=1e-5, atol=1e-4)
