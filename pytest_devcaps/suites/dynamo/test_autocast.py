"""Case 10: torch.autocast on the test's device type, inside and around a compiled region."""

from __future__ import annotations

import copy
from typing import Callable, ContextManager

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

from pytest_devcaps.suites.dynamo.support import (
    assert_close,
    forward_backward,
    seeded_mlp,
    seeded_tensor,
)


@pytest.mark.dtypes(torch.bfloat16, torch.float16)
@pytest.mark.parametrize("placement", ["inside", "outside"])
def test_autocast_compiled_matches_eager(device: torch.device, dtype: torch.dtype,
                                         placement: str) -> None:
    if not torch.amp.is_autocast_available(device.type):
        pytest.skip(f"torch.amp.is_autocast_available({device.type!r}) is False")

    def autocast() -> ContextManager[None]:
        return torch.autocast(device.type, dtype=dtype)

    model = seeded_mlp(device, torch.float32)
    compiled_model = copy.deepcopy(model)
    counter = CompileCounterWithBackend("aot_eager")
    inputs = seeded_tensor(4, 8, device=device, seed=5)

    def eager_call(x: torch.Tensor) -> torch.Tensor:
        with autocast():
            return model(x)

    compiled_call: Callable[[torch.Tensor], torch.Tensor]
    if placement == "inside":  # autocast is traced into the graph
        def body(x: torch.Tensor) -> torch.Tensor:
            with autocast():
                return compiled_model(x)
        compiled_call = torch.compile(body, backend=counter, fullgraph=True)
    else:  # the compiled module runs under an ambient autocast state
        compiled_forward = torch.compile(compiled_model, backend=counter, fullgraph=True)

        def compiled_call(x: torch.Tensor) -> torch.Tensor:
            with autocast():
                return compiled_forward(x)

    eager = forward_backward(model, eager_call, inputs)
    compiled = forward_backward(compiled_model, compiled_call, inputs)

    assert counter.frame_count == 1
    assert eager.output.dtype == dtype, (
        f"eager autocast({device.type}, {dtype}) did not cast: got {eager.output.dtype}")
    assert compiled.output.dtype == dtype
    assert_close(compiled.output, eager.output, dtype)
    assert compiled.input_grad.dtype == torch.float32
    for name, grad in eager.param_grads.items():
        assert compiled.param_grads[name].dtype == torch.float32, f"grad of {name}"
        assert_close(compiled.param_grads[name], grad, dtype, msg=f"grad of {name}")
