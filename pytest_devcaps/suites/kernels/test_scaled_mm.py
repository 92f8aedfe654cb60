"""scaled_mm on the test's device (backend "auto") against float64 math.

Every test draws fresh random data and records which backend ran (the suite's summary lists
them per device). y is checked against the documented semantics computed in float64 on the CPU
(``_checks.float64_expected``, with its own formulas for the ops), at the issue's tolerances;
output-source reductions against float64 reductions of the kernel's own y, fp32-source ones
against the float64 value before the cast. No test compares a backend with the ``reference``
backend: on a device where only the reference runs, the reference itself is what is checked.
"""

from __future__ import annotations

import math

import pytest
import torch

from devcaps_kernels import Reduce, choose_backend, last_backend, scaled_mm
from devcaps_kernels import epilogue as ep
from pytest_devcaps.suites.kernels._checks import (assert_fp32_source_close, assert_reduction_close, assert_y_close,
                                                   checked_call, float64_expected, fresh, record_backend)

pytestmark = pytest.mark.dtypes(torch.bfloat16, torch.float16, torch.float32)

RAGGED = [(33, 96, 40), (1, 16, 1), (65, 48, 129)]


def check_reductions(reds, reductions, y, expected):
    for r, got in zip(reductions, reds):
        if r.source == "output":
            assert_reduction_close(got.cpu(), y.cpu().float(), r)
        else:
            assert_fp32_source_close(got, expected, r)


@pytest.mark.parametrize("shape", RAGGED, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32], ids=["out_bf16", "out_fp32"])
def test_matches_float64(request, device, dtype, shape, with_bias, out_dtype):
    m, n, k = shape
    a, b = fresh(m, k, dtype=dtype, device=device), fresh(k, n, dtype=dtype, device=device)
    bias = fresh(n, dtype=dtype, device=device) if with_bias else None
    t = fresh(m, 1, dtype=torch.float32, device=device)
    reductions = [Reduce("sum"), Reduce("sumsq", group=8), Reduce("amax", source="fp32")]
    y, reds, expected, backend = checked_call(
        request, device, a, b, bias=bias, out_dtype=out_dtype, reductions=reductions,
        epilogue=[ep.gelu(approximate="tanh"), ep.mul(t)])
    assert backend == choose_backend(device)
    check_reductions(reds, reductions, y, expected)


def _operand(form: str, m: int, n: int, device) -> object:
    shapes = {"scalar": None, "0d": (), "row": (n,), "row2d": (1, n), "col": (m, 1), "full": (m, n)}
    if form == "scalar":
        return 0.75
    return fresh(*shapes[form], dtype=torch.float32, device=device)


OPS = {
    "relu": lambda t: ep.relu(),
    "gelu": lambda t: ep.gelu(),
    "gelu_tanh": lambda t: ep.gelu(approximate="tanh"),
    "silu": lambda t: ep.silu(),
    "sigmoid": lambda t: ep.sigmoid(),
    "tanh": lambda t: ep.tanh(),
    "scale": lambda t: ep.scale(-1.5),
    "clamp": lambda t: ep.clamp(-0.5, 0.8),
    "clamp_lo": lambda t: ep.clamp(lo=0.1),
    "clamp_hi": lambda t: ep.clamp(hi=-0.1),
}


@pytest.mark.parametrize("op", sorted(OPS))
def test_every_activation_op(request, device, dtype, op):
    m, n, k = 33, 96, 40
    a, b = fresh(m, k, dtype=dtype, device=device), fresh(k, n, dtype=dtype, device=device)
    bias = fresh(n, dtype=torch.float32, device=device)
    for epilogue in ([OPS[op](None)], [ep.scale(0.5), OPS[op](None)]):
        y, reds, _, _ = checked_call(request, device, a, b, bias=bias, epilogue=epilogue,
                                     reductions=[Reduce("sum")])
        assert_reduction_close(reds[0].cpu(), y.cpu().float(), Reduce("sum"))


@pytest.mark.parametrize("kind", ["add", "mul"])
@pytest.mark.parametrize("form", ["scalar", "0d", "row", "row2d", "col", "full"])
def test_binary_ops_every_operand_form(request, device, dtype, kind, form):
    m, n, k = 33, 96, 40
    a, b = fresh(m, k, dtype=dtype, device=device), fresh(k, n, dtype=dtype, device=device)
    t = _operand(form, m, n, device)
    op = ep.add(t) if kind == "add" else ep.mul(t)
    checked_call(request, device, a, b, epilogue=[ep.relu(), op, ep.tanh()], out_dtype=torch.float32)


GROUPS = [2, 3, 6, 16, 32, 48, 96, None]


@pytest.mark.parametrize("source", ["output", "fp32"])
@pytest.mark.parametrize("kind", ["sum", "mean", "sumsq", "meansq", "amax"])
def test_every_reduction(request, device, dtype, kind, source):
    m, n, k = 33, 96, 40
    a, b = fresh(m, k, dtype=dtype, device=device), fresh(k, n, dtype=dtype, device=device)
    reductions = [Reduce(kind, group=g, source=source) for g in GROUPS]
    y, reds, expected, _ = checked_call(request, device, a, b, bias=fresh(n, dtype=dtype, device=device),
                                        epilogue=[ep.silu()], reductions=reductions)
    for r, got in zip(reductions, reds):
        assert got.shape == r.out_shape(m, n) == ((m,) if r.group is None else (m, n // r.group))
    check_reductions(reds, reductions, y, expected)


RAGGED_GROUPS = [64, 48, 3, 128, 40, 7]


@pytest.mark.parametrize("source", ["output", "fp32"])
def test_ragged_last_group(request, device, dtype, source):
    """N = 100: every group but the last holds ``group`` columns, the last the rest."""
    m, n, k = 33, 100, 40
    a, b = fresh(m, k, dtype=dtype, device=device), fresh(k, n, dtype=dtype, device=device)
    reductions = [Reduce(kind, group=g, source=source, ragged=True)
                  for kind, g in zip(["sum", "mean", "amax", "sumsq", "meansq", "sum"], RAGGED_GROUPS)]
    y, reds, expected, _ = checked_call(request, device, a, b, epilogue=[ep.gelu()], reductions=reductions)
    for r, got in zip(reductions, reds):
        assert got.shape == (m, -(-n // r.group))
    check_reductions(reds, reductions, y, expected)


@pytest.mark.parametrize("scales", ["tensorwise", "rowwise", "mixed", "number"])
def test_scales(request, device, dtype, scales):
    m, n, k = 33, 48, 40
    a, b = fresh(m, k, dtype=dtype, device=device), fresh(k, n, dtype=dtype, device=device)
    row_a = torch.rand(m, 1, device=device) + 0.5
    row_b = torch.rand(1, n, device=device) + 0.5
    one = torch.tensor(0.37, device=device)
    sa, sb = {"tensorwise": (one, one.reshape(1)), "rowwise": (row_a, row_b),
              "mixed": (one.reshape(1, 1), row_b), "number": (2.0, None)}[scales]
    y, reds, _, _ = checked_call(request, device, a, b, scale_a=sa, scale_b=sb,
                                 bias=fresh(n, dtype=dtype, device=device), reductions=[Reduce("mean", group=16)])
    assert_reduction_close(reds[0].cpu(), y.cpu().float(), Reduce("mean", group=16))


def _fp8_case(request, device, fp8_dtype):
    m, n, k = 33, 96, 40
    a = fresh(m, k, dtype=torch.float32, device=device, scale=8.0).to(fp8_dtype)
    b = fresh(k, n, dtype=torch.float32, device=device, scale=8.0).to(fp8_dtype)
    reductions = [Reduce("sumsq", group=32), Reduce("amax")]
    y, reds, _, _ = checked_call(request, device, a, b, scale_a=torch.rand(m, 1, device=device) / 64,
                                 scale_b=torch.rand(1, n, device=device) / 64,
                                 bias=fresh(n, dtype=torch.bfloat16, device=device),
                                 epilogue=[ep.gelu(approximate="tanh")], reductions=reductions)
    for r, got in zip(reductions, reds):
        assert_reduction_close(got.cpu(), y.cpu().float(), r)


@pytest.mark.requires_capability("dtype.fp8_e4m3fn", native=False)
def test_fp8_e4m3fn(request, device):
    _fp8_case(request, device, torch.float8_e4m3fn)


@pytest.mark.requires_capability("dtype.fp8_e5m2", native=False)
def test_fp8_e5m2(request, device):
    _fp8_case(request, device, torch.float8_e5m2)


def test_store_output_false(request, device, dtype):
    m, n, k = 33, 96, 40
    a, b = fresh(m, k, dtype=dtype, device=device), fresh(k, n, dtype=dtype, device=device)
    reductions = [Reduce("sum"), Reduce("meansq", group=32), Reduce("amax", group=3)]
    y, reds, _, _ = checked_call(request, device, a, b, epilogue=[ep.tanh()], reductions=reductions)
    y_none, reds_only = scaled_mm(a, b, epilogue=[ep.tanh()], reductions=reductions, store_output=False)
    record_backend(request, device)
    assert y_none is None
    for r, got, full in zip(reductions, reds_only, reds):
        torch.testing.assert_close(got, full, rtol=1e-5, atol=1e-5)
        assert_reduction_close(got.cpu(), y.cpu().float(), r)


def test_k_zero_gives_zeros(request, device, dtype):
    a = torch.empty(5, 0, dtype=dtype, device=device)
    b = torch.empty(0, 16, dtype=dtype, device=device)
    y, (total, amax) = scaled_mm(a, b, reductions=[Reduce("sum"), Reduce("amax", group=4)])
    record_backend(request, device)
    assert torch.equal(y.float(), torch.zeros(5, 16, device=device))
    assert torch.equal(total, torch.zeros(5, device=device))
    assert torch.equal(amax, torch.zeros(5, 4, device=device))
    bias = fresh(16, dtype=torch.float32, device=device)
    y, _ = scaled_mm(a, b, bias=bias, epilogue=[ep.relu()], out_dtype=torch.float32)
    torch.testing.assert_close(y.cpu().double(), torch.relu(bias.cpu().double()).expand(5, 16))


def test_non_contiguous_inputs(request, device, dtype):
    m, n, k = 33, 48, 40
    a = fresh(k, 2 * m, dtype=dtype, device=device).t()[::2]      # transposed and strided
    b = fresh(n, k, dtype=dtype, device=device).t()                # column-major
    bias = fresh(2 * n, dtype=dtype, device=device)[::2]
    full = fresh(n, m, dtype=torch.float32, device=device).t()
    assert not a.is_contiguous() and not b.is_contiguous() and not bias.is_contiguous()
    kwargs = dict(bias=bias, epilogue=[ep.add(full), ep.relu()], reductions=[Reduce("sum", group=16)])
    y, reds, expected, _ = checked_call(request, device, a, b, **kwargs)
    dense_y, _ = scaled_mm(a.contiguous(), b.contiguous(), **kwargs)
    assert_y_close(dense_y.cpu(), expected.rounded(dense_y.dtype))
    assert_reduction_close(reds[0].cpu(), y.cpu().float(), Reduce("sum", group=16))


@pytest.mark.parametrize("op", sorted(OPS))
def test_nan_propagates(request, device, dtype, op):
    m, n, k = 9, 32, 24
    a, b = fresh(m, k, dtype=dtype, device=device), fresh(k, n, dtype=dtype, device=device)
    a[3, 5] = math.nan
    reductions = [Reduce("sum"), Reduce("amax", group=8), Reduce("sumsq", source="fp32")]
    y, reds = scaled_mm(a, b, epilogue=[OPS[op](None)], reductions=reductions)
    record_backend(request, device)
    assert torch.isnan(y[3].float()).all()
    assert not torch.isnan(y[torch.arange(m, device=device) != 3].float()).any()
    for got in reds:
        assert torch.isnan(got[3]).all()
        assert not torch.isnan(got[:3]).any()


def test_inf_propagates(request, device, dtype):
    m, n, k = 9, 32, 24
    a, b = fresh(m, k, dtype=dtype, device=device), fresh(k, n, dtype=dtype, device=device)
    a[2, 0] = math.inf
    b[0] = b[0].abs() + 1          # row 0 of b positive: row 2 of y is +inf, not NaN
    y, (total, amax) = scaled_mm(a, b, out_dtype=torch.float32,
                                 reductions=[Reduce("sum"), Reduce("amax")])
    record_backend(request, device)
    assert torch.isposinf(y[2]).all() and torch.isfinite(y[3]).all()
    assert torch.isposinf(total[2]) and torch.isposinf(amax[2])


def test_auto_records_backend(request, device, devcaps):
    a = fresh(4, 8, dtype=torch.float32, device=device)
    scaled_mm(a, a.t().contiguous())
    expected = ("triton" if devcaps.has("compile.triton")
                else "cpu" if device.type == "cpu" else "reference")
    assert record_backend(request, device) == expected == choose_backend(device)
    y, _ = scaled_mm(a, a.t().contiguous(), backend="reference")
    assert last_backend() == "reference"
    # the reference backend too is checked against float64, not against itself
    torch.testing.assert_close(y.cpu().float(), float64_expected(a, a.t()).rounded(torch.bfloat16).float(),
                               atol=2e-2, rtol=2e-2)
