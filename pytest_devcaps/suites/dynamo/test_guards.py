"""Cases 2, 3 and 6: frame counts, recompiles on dtype/device change, recompile prohibition."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch._dynamo.exc import FailOnRecompileLimitHit
from torch._dynamo.testing import CompileCounter

from pytest_devcaps.suites.dynamo.support import (
    POINTWISE_OP_COUNT,
    assert_close,
    guard_failure_reasons,
    other_device,
    pointwise,
    seeded_tensor,
)

UNARY_OPS = ("sin", "cos", "tanh", "exp", "neg", "abs", "sigmoid", "relu", "square", "log1p",
             "expm1", "sqrt")


def unary_by_name(x: torch.Tensor, name: str) -> torch.Tensor:
    """Dynamo specialises on the string, so every new ``name`` is a recompile."""
    return getattr(torch, name)(x.abs() + 1)


def test_one_frame_and_no_recompile_on_second_call(device: torch.device) -> None:
    counter = CompileCounter()
    compiled = torch.compile(pointwise, backend=counter)
    x, y = (seeded_tensor(8, device=device, seed=s) for s in (1, 2))

    assert_close(compiled(x, y), pointwise(x, y), torch.float32)
    assert (counter.frame_count, counter.op_count) == (1, POINTWISE_OP_COUNT)

    x2, y2 = (seeded_tensor(8, device=device, seed=s) for s in (3, 4))
    assert_close(compiled(x2, y2), pointwise(x2, y2), torch.float32)
    assert (counter.frame_count, counter.op_count) == (1, POINTWISE_OP_COUNT), (
        "same shapes/dtype/device must reuse the cached frame")


@pytest.mark.dtypes(torch.bfloat16, torch.float16)
def test_recompiles_on_dtype_change(device: torch.device, dtype: torch.dtype) -> None:
    counter = CompileCounter()
    compiled = torch.compile(pointwise, backend=counter)
    x32, y32 = (seeded_tensor(8, device=device, seed=s) for s in (1, 2))
    x, y = x32.to(dtype), y32.to(dtype)

    compiled(x32, y32)
    assert counter.frame_count == 1
    result = compiled(x, y)
    assert counter.frame_count == 2, f"no recompile for float32 -> {dtype}"
    assert any("dtype" in reason for reason in guard_failure_reasons(pointwise))
    assert result.dtype == dtype
    assert_close(result, pointwise(x, y), dtype)

    compiled(x32, y32)
    compiled(x, y)
    assert counter.frame_count == 2, "both dtypes must now hit their cached frames"


def test_recompiles_on_device_change(device: torch.device) -> None:
    second = other_device(device)
    if second is None:
        pytest.skip(f"needs a second device type besides {device.type}: no usable accelerator "
                    "(torch.accelerator.current_accelerator(check_available=True) is None)")
    counter = CompileCounter()
    compiled = torch.compile(pointwise, backend=counter)
    here = [seeded_tensor(8, device=device, seed=s) for s in (1, 2)]
    there = [t.to(second) for t in here]

    compiled(*here)
    assert counter.frame_count == 1
    result = compiled(*there)
    assert counter.frame_count == 2, f"no recompile for {device} -> {second}"
    assert result.device.type == second.type
    assert_close(result.cpu(), pointwise(*here).cpu(), torch.float32)

    compiled(*here)
    compiled(*there)
    assert counter.frame_count == 2, "both devices must now hit their cached frames"


def test_fail_on_recompile_stance_raises(device: torch.device) -> None:
    counter = CompileCounter()
    compiled = torch.compile(unary_by_name, backend=counter)
    x = seeded_tensor(8, device=device)
    compiled(x, "sin")

    with torch.compiler.set_stance("fail_on_recompile"):
        assert_close(compiled(x, "sin"), unary_by_name(x, "sin"), torch.float32)
        with pytest.raises(RuntimeError, match="fail_on_recompile"):
            compiled(x, "cos")
    assert counter.frame_count == 1

    compiled(x, "cos")
    assert counter.frame_count == 2, "the default stance must recompile again"


def test_recompile_limit_is_honoured(device: torch.device) -> None:
    limit = torch._dynamo.config.recompile_limit
    names = UNARY_OPS[: limit + 2]
    assert len(names) > limit, "not enough distinct ops to exceed the recompile limit"
    counter = CompileCounter()
    compiled = torch.compile(unary_by_name, backend=counter)
    x = seeded_tensor(8, device=device)

    for name in names:
        # Past the limit Dynamo runs the frame eagerly: still correct, just not compiled.
        assert_close(compiled(x, name), unary_by_name(x, name), torch.float32, msg=name)

    assert counter.frame_count == limit


def test_recompile_limit_hit_fails_when_asked(device: torch.device) -> None:
    counter = CompileCounter()
    compiled = torch.compile(unary_by_name, backend=counter)
    x = seeded_tensor(8, device=device)

    with torch._dynamo.config.patch(recompile_limit=2, fail_on_recompile_limit_hit=True):
        compiled(x, "sin")
        compiled(x, "cos")
        with pytest.raises(FailOnRecompileLimitHit):
            compiled(x, "tanh")
    assert counter.frame_count == 2
