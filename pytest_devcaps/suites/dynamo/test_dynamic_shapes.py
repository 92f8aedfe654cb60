"""Case 4: shape changes under automatic dynamic, ``dynamic=True`` and ``mark_dynamic``."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch._dynamo.testing import CompileCounter

from pytest_devcaps.suites.dynamo.support import assert_close, pointwise, seeded_tensor

# Start above 1: sizes 0 and 1 are always specialised and would add their own compiles.
SIZES = (4, 8, 16, 32, 64)


def _pair(size: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    return seeded_tensor(size, device=device, seed=size), seeded_tensor(size, device=device,
                                                                        seed=size + 1)


def test_automatic_dynamic_costs_exactly_one_extra_compile(device: torch.device) -> None:
    counter = CompileCounter()
    compiled = torch.compile(pointwise, backend=counter)

    frames = []
    for size in SIZES:
        x, y = _pair(size, device)
        assert_close(compiled(x, y), pointwise(x, y), torch.float32, msg=f"size {size}")
        frames.append(counter.frame_count)

    # static for the first size, one dynamic recompile on the second, nothing after
    assert frames == [1] + [2] * (len(SIZES) - 1)


@pytest.mark.parametrize("how", ["dynamic=True", "mark_dynamic"])
def test_dynamic_compiles_once_over_sizes(device: torch.device, how: str) -> None:
    counter = CompileCounter()
    compiled = torch.compile(pointwise, backend=counter, dynamic=True if how == "dynamic=True"
                             else None)

    for size in SIZES:
        x, y = _pair(size, device)
        if how == "mark_dynamic":
            # mark every broadcast partner, or Dynamo raises a ConstraintViolationError
            torch._dynamo.mark_dynamic(x, 0)
            torch._dynamo.mark_dynamic(y, 0)
        assert_close(compiled(x, y), pointwise(x, y), torch.float32, msg=f"size {size}")

    assert counter.frame_count == 1, f"{how} recompiled over sizes {SIZES}"
