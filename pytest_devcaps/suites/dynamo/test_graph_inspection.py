"""Case 7: the captured FX graphs hold the expected ops, on the test's device."""

from __future__ import annotations

import warnings

import torch
from torch._dynamo.testing import AotEagerAndRecordGraphs, EagerAndRecordGraphs

from pytest_devcaps.suites.dynamo.support import (
    POINTWISE_ATEN_TARGETS,
    POINTWISE_TORCH_TARGETS,
    assert_close,
    call_targets,
    placeholder_values,
    pointwise,
    seeded_tensor,
)


def test_dynamo_graph_contains_expected_ops(device: torch.device) -> None:
    recorder = EagerAndRecordGraphs()
    x, y = (seeded_tensor(8, device=device, seed=s) for s in (1, 2))

    assert_close(torch.compile(pointwise, backend=recorder)(x, y), pointwise(x, y),
                 torch.float32)

    assert len(recorder.graphs) == 1
    graph = recorder.graphs[0]
    assert set(call_targets(graph)) == POINTWISE_TORCH_TARGETS
    inputs = placeholder_values(graph)
    assert len(inputs) == 2
    assert all(value.device == x.device for value in inputs), "inputs traced on another device"


def test_aot_graphs_contain_expected_aten_ops(device: torch.device) -> None:
    recorder = AotEagerAndRecordGraphs()
    x, y = (seeded_tensor(8, device=device, seed=s, requires_grad=True) for s in (1, 2))

    with warnings.catch_warnings():
        # the recorder hands AOTAutograd an unboxed callable; the warning says just that
        warnings.filterwarnings("ignore", message=".*boxed arguments.*")
        torch.compile(pointwise, backend=recorder)(x, y).sum().backward()

    assert len(recorder.fw_graphs) == 1 and len(recorder.bw_graphs) == 1
    assert set(call_targets(recorder.fw_graphs[0])) == POINTWISE_ATEN_TARGETS
    backward_ops = set(call_targets(recorder.bw_graphs[0]))
    # d/dx sin = cos, d/dy cos = -sin
    assert {torch.ops.aten.cos.default, torch.ops.aten.sin.default,
            torch.ops.aten.neg.default} <= backward_ops
    assert x.grad is not None and y.grad is not None
    assert_close(x.grad, torch.cos(x.detach()), torch.float32)
    assert_close(y.grad, -2 * torch.sin(y.detach()), torch.float32)
