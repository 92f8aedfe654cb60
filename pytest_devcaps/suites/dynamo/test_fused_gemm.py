"""Case 11: the bundled fused GEMM (reference backend) compiles with fullgraph, equals eager."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

from pytest_devcaps.suites.dynamo.support import assert_close, seeded_tensor

kernels = pytest.importorskip(
    "devcaps_kernels", reason="devcaps_kernels (the bundled fused GEMM) is not installed")

M, K, N = 16, 32, 24


@pytest.mark.dtypes(torch.float32, torch.bfloat16)
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_scaled_mm_reference_compiles_fullgraph(device: torch.device, dtype: torch.dtype,
                                                backend: str) -> None:
    a = seeded_tensor(M, K, device=device, dtype=dtype, seed=1)
    b = seeded_tensor(K, N, device=device, dtype=dtype, seed=2)
    scale_a = torch.tensor(0.5, device=device)
    scale_b = seeded_tensor(1, N, device=device, seed=3).abs() + 0.5
    bias = seeded_tensor(N, device=device, seed=4)

    def fused(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
              bias: torch.Tensor) -> tuple[torch.Tensor | None, tuple[torch.Tensor, ...]]:
        return kernels.scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=dtype,
                                 epilogue=(kernels.epilogue.gelu(),),
                                 reductions=(kernels.Reduce("sum"),), backend="reference")

    counter = CompileCounterWithBackend(backend)
    y, (row_sum,) = torch.compile(fused, backend=counter, fullgraph=True)(a, b, scale_a,
                                                                          scale_b, bias)
    y_ref, (row_sum_ref,) = fused(a, b, scale_a, scale_b, bias)

    assert counter.frame_count == 1
    assert y is not None and y_ref is not None
    assert y.dtype == dtype and y.shape == (M, N)
    assert_close(y, y_ref, dtype)
    assert row_sum.dtype == torch.float32 and row_sum.shape == (M,)
    assert_close(row_sum, row_sum_ref, dtype, scale=float(N))
