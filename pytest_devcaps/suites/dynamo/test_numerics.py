"""Case 1: compiled equals eager, for a function and an nn.Module forward+backward."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

from pytest_devcaps.suites.dynamo.support import (
    assert_close,
    compare_forward_backward,
    pointwise,
    seeded_mlp,
    seeded_tensor,
)

BACKENDS = ["eager", "aot_eager"]
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@pytest.mark.dtypes(*DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_function_matches_eager(device: torch.device, dtype: torch.dtype,
                                         backend: str) -> None:
    x = seeded_tensor(16, 8, device=device, dtype=dtype, seed=1)
    y = seeded_tensor(16, 8, device=device, dtype=dtype, seed=2)
    counter = CompileCounterWithBackend(backend)

    result = torch.compile(pointwise, backend=counter)(x, y)

    assert counter.frame_count == 1, "the function was not compiled"
    assert result.dtype == dtype and result.device == x.device
    assert_close(result, pointwise(x, y), dtype)


@pytest.mark.dtypes(*DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_module_forward_backward_matches_eager(device: torch.device,
                                                        dtype: torch.dtype,
                                                        backend: str) -> None:
    model = seeded_mlp(device, dtype)
    inputs = seeded_tensor(4, 8, device=device, dtype=dtype, seed=3)
    counter = CompileCounterWithBackend(backend)

    compare_forward_backward(model, counter, inputs, dtype)

    assert counter.frame_count == 1, "the module forward was not compiled as one frame"
