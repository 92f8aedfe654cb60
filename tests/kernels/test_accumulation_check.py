"""The large-K accumulation check tells Hopper's fast fp8 accumulation from fp32 accumulation.

No GPU here, so the accumulators are emulated on the CPU: products of each 32-wide K chunk
(one WGMMA instruction) are exact; the accumulator is rounded to 13 mantissa bits (the ~14-bit
precision DeepSeek-V3's report measured for Hopper FP8 tensor cores), and "promoted" adds that
partial into an fp32 accumulator every BLOCK_K, as Triton does with
``max_num_imprecise_acc=BLOCK_K``.
"""

from __future__ import annotations

import pytest
import torch

from pytest_devcaps.suites.kernels._checks import (FP32_ACCUMULATION_RTOL, accumulation_error,
                                                   large_k_fp8_operands)


def _round_mantissa(x: torch.Tensor, bits: int = 13) -> torch.Tensor:
    """Round fp32 values to ``bits`` mantissa bits, to nearest even."""
    drop = 23 - bits
    i = x.view(torch.int32)
    i = (i + ((1 << (drop - 1)) - 1) + ((i >> drop) & 1)) & ~((1 << drop) - 1)
    return i.view(torch.float32)


def _emulated(a: torch.Tensor, b: torch.Tensor, promote_every: int | None) -> torch.Tensor:
    af, bf = a.float(), b.float()
    acc = torch.zeros(a.shape[0], b.shape[1])
    part = torch.zeros_like(acc)
    for step, k0 in enumerate(range(0, a.shape[1], 32), start=1):
        part = _round_mantissa(part + af[:, k0:k0 + 32] @ bf[k0:k0 + 32])
        if promote_every is not None and step % (promote_every // 32) == 0:
            acc, part = acc + part, torch.zeros_like(acc)
    return acc + part


def test_round_mantissa():
    x = torch.tensor([1.0, 1 + 2**-13, 1 + 2**-14, 1 + 3 * 2**-14, 3.0])
    assert _round_mantissa(x).tolist() == [1.0, 1 + 2**-13, 1.0, 1 + 2**-12, 3.0]


@pytest.mark.parametrize("k", [4096, 8192])
def test_the_check_rejects_fast_and_accepts_promoted_accumulation(k):
    a, b = large_k_fp8_operands(8, 32, k, dtype=torch.float8_e4m3fn, device=torch.device("cpu"))
    fast = accumulation_error(_emulated(a, b, None), a, b)
    promoted = accumulation_error(_emulated(a, b, 128), a, b)
    fp32 = accumulation_error(a.float() @ b.float(), a, b)
    assert fast > 4 * FP32_ACCUMULATION_RTOL, fast
    assert promoted < FP32_ACCUMULATION_RTOL / 2 and fp32 < FP32_ACCUMULATION_RTOL / 4, (promoted, fp32)
