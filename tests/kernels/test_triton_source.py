"""The generated Triton source for device paths the CPU cannot run (no triton import needed)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from devcaps_kernels import Reduce, scaled_mm
from devcaps_kernels import epilogue as ep
from devcaps_kernels.problem import build_problem
from devcaps_kernels.triton_backend import _plan, _source


def _plan_for(dtype, *, native_fp8=False, interpret=False):
    a, b = torch.zeros(4, 8).to(dtype), torch.zeros(8, 96).to(dtype)
    p = build_problem(a, b, None, None, None, torch.bfloat16, [ep.relu()],
                      [Reduce("sum"), Reduce("sum", group=32), Reduce("amax", group=3)], True)
    plan = _plan(p, block_n=64)
    return dataclasses.replace(plan, native_fp8=native_fp8, interpret=interpret)


@pytest.mark.parametrize("native", [True, False])
def test_fp8_dot_operands(native):
    source = _source(_plan_for(torch.float8_e4m3fn, native_fp8=native))
    loop = source.split("for k0")[1].split("acc = tl.dot")[0]
    # native fp8 goes to tl.dot as fp8; otherwise the tile is decoded to bf16 (exact).
    if native:
        assert "a = a.to(tl.float8e4nv, bitcast=True)\n" in loop
    else:
        assert "a = _decode_e4m3fn(a).to(tl.bfloat16)\n" in loop
    assert "tl.float32" not in loop


def test_interpreter_only_changes_the_dot_operand_dtype():
    device = _source(_plan_for(torch.bfloat16))
    interp = _source(_plan_for(torch.bfloat16, interpret=True))
    assert "a = a.to(tl.float32)" in interp and "a = a.to(" not in device
    assert device.split("mask = mask_m")[1] == interp.split("mask = mask_m")[1]


def test_segments_follow_the_block():
    plan = _plan_for(torch.bfloat16)
    assert [seg for (_, _, seg) in plan.reductions] == [32, 32, 1]  # gcd(96|32|3, 64)


def test_triton_backend_on_cpu_needs_the_interpreter(monkeypatch):
    pytest.importorskip("triton", reason="triton is not installed")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
        scaled_mm(torch.ones(2, 2), torch.ones(2, 2), backend="triton")
