"""Cases 8 and 9: real Inductor on the device, and ``mode="reduce-overhead"``.

Each case here pays an Inductor compile (the first one in a process about 10-20 s on CPU), so
the set is kept small; the conftest points all of them at one cache directory per run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import torch
from torch._dynamo.utils import counters

from pytest_devcaps.suites.dynamo.support import (
    assert_close,
    compare_forward_backward,
    pointwise,
    seeded_mlp,
    seeded_tensor,
)

if TYPE_CHECKING:
    from pytest_devcaps.registry import DeviceCapabilities

pytestmark = pytest.mark.requires_capability("compile.inductor")

# Inductor generates its own kernels (vectorised transcendental functions, reordered sums).
INDUCTOR_SCALE = 10.0
REPLAYS = 3  # graph trees warm up on the first call and record on a later one


def test_inductor_function_matches_eager_in_one_fused_kernel(device: torch.device) -> None:
    from torch._inductor.utils import run_and_get_code

    x, y = (seeded_tensor(64, device=device, seed=s) for s in (1, 2))

    result, sources = run_and_get_code(torch.compile(pointwise, backend="inductor"), x, y)

    assert_close(result, pointwise(x, y), torch.float32, scale=INDUCTOR_SCALE)
    assert len(sources) == 1
    # four pointwise ops become one kernel named after all of them
    assert "fused_add_cos_mul_sin" in sources[0], sources[0][:2000]


def test_inductor_module_forward_backward_matches_eager(device: torch.device) -> None:
    model = seeded_mlp(device, torch.float32)
    inputs = seeded_tensor(4, 8, device=device, seed=3)

    compare_forward_backward(model, "inductor", inputs, torch.float32, scale=INDUCTOR_SCALE)


def _run_reduce_overhead(device: torch.device) -> None:
    compiled = torch.compile(pointwise, mode="reduce-overhead")
    for step in range(REPLAYS):
        torch.compiler.cudagraph_mark_step_begin()  # each call is a new step: replay allowed
        x, y = (seeded_tensor(64, device=device, seed=10 * step + s) for s in (1, 2))
        # compare before the next replay: graph outputs live in memory the replay reuses
        assert_close(compiled(x, y), pointwise(x, y), torch.float32, scale=INDUCTOR_SCALE,
                     msg=f"call {step}")


@pytest.mark.requires_capability("runtime.graphs")
def test_reduce_overhead_captures_device_graphs(device: torch.device) -> None:
    from torch._inductor import config as inductor_config
    from torch._inductor.cudagraph_trees import get_manager

    with inductor_config.patch({"triton.cudagraph_or_error": True}):
        _run_reduce_overhead(device)

    assert counters["inductor"]["cudagraph_skips"] == 0, (
        f"reduce-overhead skipped graph capture on {device}, which claims runtime.graphs")
    index = device.index if device.index is not None else torch.accelerator.current_device_index()
    manager = get_manager(index, create_if_none_exists=False)
    assert manager is not None, "no graph-tree manager for the device: nothing was captured"
    recorded = sum(len(nodes) for nodes in manager.roots.values())
    assert recorded >= 1, "reduce-overhead ran without recording a device graph"


def test_reduce_overhead_falls_back_without_device_graphs(device: torch.device,
                                                          devcaps: DeviceCapabilities) -> None:
    if devcaps.has("runtime.graphs"):
        pytest.skip("the device has runtime.graphs: test_reduce_overhead_captures_device_graphs "
                    "covers it")

    _run_reduce_overhead(device)

    assert counters["inductor"]["cudagraph_skips"] == 1, (
        "reduce-overhead must count exactly one graph-capture skip for the one compiled graph")
