"""Every invalid input raises TypeError/ValueError saying what was expected and what was given."""

from __future__ import annotations

import pytest
import torch

from devcaps_kernels import Reduce, scaled_mm
from devcaps_kernels import epilogue as ep
from pytest_devcaps.suites.kernels._checks import fresh

M, N, K = 6, 8, 4


@pytest.fixture
def ab(device):
    return fresh(M, K, dtype=torch.float32, device=device), fresh(K, N, dtype=torch.float32, device=device)


def _call(a, b, **kwargs):
    return scaled_mm(a, b, **kwargs)


CASES = {
    "k_mismatch": (ValueError, r"shape mismatch.*K = 4, got b \[3, 8\]", lambda a, b, d: _call(a, b[:-1].clone())),
    "a_not_2d": (ValueError, r"a must be 2-D.*\[24\]", lambda a, b, d: _call(a.flatten(), b)),
    "int_dtype": (TypeError, r"a has unsupported dtype torch.int32", lambda a, b, d: _call(a.int(), b)),
    "float64": (TypeError, r"b has unsupported dtype torch.float64", lambda a, b, d: _call(a, b.double())),
    "mixed_dtypes": (TypeError, r"share a dtype.*torch.float32 and torch.bfloat16",
                     lambda a, b, d: _call(a, b.bfloat16())),
    "out_dtype": (TypeError, r"out_dtype must be one of.*got torch.float8_e4m3fn",
                  lambda a, b, d: _call(a, b, out_dtype=torch.float8_e4m3fn)),
    "scale_a_shape": (ValueError, r"scale_a must be a scalar \(numel 1\) or \[M, 1\] = \[6, 1\], got shape \[1, 8\]",
                      lambda a, b, d: _call(a, b, scale_a=torch.ones(1, N, device=d))),
    "scale_b_shape": (ValueError, r"scale_b must be .*\[1, N\] = \[1, 8\], got shape \[8\]",
                      lambda a, b, d: _call(a, b, scale_b=torch.ones(N, device=d))),
    "scale_dtype": (TypeError, r"scale_a must be float32.*got torch.bfloat16",
                    lambda a, b, d: _call(a, b, scale_a=torch.ones(M, 1, device=d).bfloat16())),
    "scale_type": (TypeError, r"scale_b must be None, a number or a float32 tensor, got str",
                   lambda a, b, d: _call(a, b, scale_b="1")),
    "bias_shape": (ValueError, r"bias must be \[N\] = \[8\], got shape \[1, 8\]",
                   lambda a, b, d: _call(a, b, bias=torch.ones(1, N, device=d))),
    "bias_dtype": (TypeError, r"bias must be a floating-point tensor, got torch.int64",
                   lambda a, b, d: _call(a, b, bias=torch.ones(N, dtype=torch.long, device=d))),
    "operand_shape": (ValueError, r"epilogue\[1\] \(mul\): operand must be .*got shape \[6\]",
                      lambda a, b, d: _call(a, b, epilogue=[ep.relu(), ep.mul(torch.ones(M, device=d))])),
    "operand_dtype": (TypeError, r"add\(t\): t must be a floating-point tensor, got dtype torch.int64",
                      lambda a, b, d: ep.add(torch.ones(N, dtype=torch.long))),
    "operand_type": (TypeError, r"mul\(t\) must be a Python number, got str", lambda a, b, d: ep.mul("2")),
    "not_an_op": (TypeError, r"epilogue\[0\] must be an op .*got builtin_function",
                  lambda a, b, d: _call(a, b, epilogue=[torch.relu])),
    "gelu_approx": (ValueError, r"approximate.*got 'fast'", lambda a, b, d: ep.gelu(approximate="fast")),
    "clamp_empty": (ValueError, r"clamp\(\) expects at least one of lo, hi", lambda a, b, d: ep.clamp()),
    "group": (ValueError, r"N % group must be 0, got N = 8, group = 3 \(Reduce\(..., ragged=True\)",
              lambda a, b, d: _call(a, b, reductions=[Reduce("sum", group=3)])),
    "reduce_kind": (ValueError, r"Reduce.kind must be one of .*got 'max'", lambda a, b, d: Reduce("max")),
    "reduce_source": (ValueError, r"Reduce.source must be one of .*got 'acc'",
                      lambda a, b, d: Reduce("sum", source="acc")),
    "reduce_group": (ValueError, r"Reduce.group must be None or a positive int, got 0",
                     lambda a, b, d: Reduce("sum", group=0)),
    "reduce_ragged": (ValueError, r"Reduce.ragged must be a bool, got 'yes'",
                      lambda a, b, d: Reduce("sum", group=3, ragged="yes")),
    "fast_accum": (TypeError, r"fast_accum must be a bool, got str", lambda a, b, d: _call(a, b, fast_accum="no")),
    "bias_fp8": (TypeError, r"bias must not be fp8, got torch.float8_e4m3fn",
                 lambda a, b, d: _call(a, b, bias=torch.zeros(N, device=d).to(torch.float8_e4m3fn))),
    "not_a_reduce": (TypeError, r"reductions\[0\] must be a Reduce, got str",
                     lambda a, b, d: _call(a, b, reductions=["sum"])),
    "backend": (ValueError, r"backend must be one of .*got 'fast'", lambda a, b, d: _call(a, b, backend="fast")),
    "not_tensor": (TypeError, r"a must be a torch.Tensor, got list", lambda a, b, d: _call([[1.0]], b)),
    "meta_device": (ValueError, r"b must be on .* like a, got a tensor on meta",
                    lambda a, b, d: _call(a, b.to("meta"))),
    "operand_device": (ValueError, r"operand must be on .* like a, got a tensor on meta",
                       lambda a, b, d: _call(a, b, epilogue=[ep.add(torch.ones(N, device="meta"))])),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_invalid_input_raises(device, ab, case):
    error, pattern, call = CASES[case]
    a, b = ab
    with pytest.raises(error, match=pattern):
        call(a, b, device)
