"""Small functions, models, tolerances and device lookups shared by the Dynamo suite."""

from __future__ import annotations

import copy
import operator
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn


@dataclass(frozen=True)
class Tolerance:
    """Absolute and relative tolerance for comparing compiled with eager results."""

    atol: float
    rtol: float


# Compiled and eager run the same kernels with "eager"/"aot_eager", but decompositions and
# accumulation order may differ; low-precision gradients accumulate over a few terms.
_TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float32: Tolerance(atol=1e-5, rtol=1.3e-6),
    torch.bfloat16: Tolerance(atol=1e-2, rtol=1.6e-2),
    torch.float16: Tolerance(atol=1e-3, rtol=1e-3),
}


def tolerance(dtype: torch.dtype) -> Tolerance:
    """The tolerance used for ``dtype`` (fp32's when the dtype has no entry of its own)."""
    return _TOLERANCES.get(dtype, _TOLERANCES[torch.float32])


def assert_close(actual: Any, expected: Any, dtype: torch.dtype, *, scale: float = 1.0,
                 msg: str | None = None) -> None:
    """``torch.testing.assert_close`` with the per-dtype tolerance, optionally widened."""
    tol = tolerance(dtype)
    torch.testing.assert_close(actual, expected, atol=tol.atol * scale, rtol=tol.rtol * scale,
                               msg=msg)


def pointwise(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Four pointwise ops in one frame: sin, cos, mul, add."""
    return torch.sin(x) + torch.cos(y) * 2


POINTWISE_OP_COUNT = 4
POINTWISE_TORCH_TARGETS: frozenset[Any] = frozenset({torch.sin, torch.cos, operator.mul,
                                                     operator.add})
POINTWISE_ATEN_TARGETS: frozenset[Any] = frozenset({torch.ops.aten.sin.default,
                                                    torch.ops.aten.cos.default,
                                                    torch.ops.aten.mul.Tensor,
                                                    torch.ops.aten.add.Tensor})


def explicit_graph_break(x: torch.Tensor) -> torch.Tensor:
    """Two graphs split by a user-inserted graph break."""
    x = torch.sin(x)
    torch._dynamo.graph_break()
    return torch.cos(x)


def data_dependent_graph_break(x: torch.Tensor) -> torch.Tensor:
    """Two graphs split by ``Tensor.item()`` feeding Python control flow."""
    if x.sum().item() > 0:
        return torch.sin(x)
    return torch.cos(x)


class SmallMLP(nn.Module):
    """Linear -> GELU -> Linear: a matmul, a non-trivial activation and a bias in backward."""

    def __init__(self, features: int = 8, hidden: int = 16, out: int = 4) -> None:
        super().__init__()
        self.fc1 = nn.Linear(features, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


def seeded_mlp(device: torch.device, dtype: torch.dtype, seed: int = 0) -> SmallMLP:
    """A SmallMLP with seeded (CPU-generated, hence device-independent) weights."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = SmallMLP()
    return model.to(device=device, dtype=dtype)


def seeded_tensor(*shape: int, device: torch.device, dtype: torch.dtype = torch.float32,
                  seed: int = 0, requires_grad: bool = False) -> torch.Tensor:
    """A normal tensor drawn on the CPU generator, then moved: same values on every device."""
    generator = torch.Generator().manual_seed(seed)
    tensor = torch.randn(*shape, generator=generator).to(device=device, dtype=dtype)
    return tensor.requires_grad_(requires_grad)


@dataclass(frozen=True)
class ForwardBackward:
    """Output, input gradient and parameter gradients of one forward+backward."""

    output: torch.Tensor
    input_grad: torch.Tensor
    param_grads: dict[str, torch.Tensor]


def forward_backward(model: nn.Module, call: Callable[[torch.Tensor], torch.Tensor],
                     inputs: torch.Tensor) -> ForwardBackward:
    """Run ``call(inputs)`` and backward of its sum; collect output and every gradient."""
    inputs = inputs.detach().clone().requires_grad_(True)
    output = call(inputs)
    output.sum().backward()
    assert inputs.grad is not None
    grads = {}
    for name, param in model.named_parameters():
        assert param.grad is not None, f"parameter {name} got no gradient"
        grads[name] = param.grad
    return ForwardBackward(output.detach(), inputs.grad, grads)


def compare_forward_backward(model: nn.Module, backend: Any, inputs: torch.Tensor,
                             dtype: torch.dtype, *, scale: float = 1.0) -> None:
    """Assert that ``torch.compile(copy, backend)`` matches ``model`` in output and grads."""
    compiled_model = copy.deepcopy(model)
    compiled = torch.compile(compiled_model, backend=backend)
    eager_run = forward_backward(model, model, inputs)
    compiled_run = forward_backward(compiled_model, compiled, inputs)
    assert_close(compiled_run.output, eager_run.output, dtype, scale=scale, msg="output")
    assert_close(compiled_run.input_grad, eager_run.input_grad, dtype, scale=scale,
                 msg="input grad")
    assert compiled_run.param_grads.keys() == eager_run.param_grads.keys()
    for name, grad in eager_run.param_grads.items():
        assert_close(compiled_run.param_grads[name], grad, dtype, scale=scale,
                     msg=f"grad of {name}")


def call_targets(graph_module: torch.fx.GraphModule) -> list[Any]:
    """The targets of every ``call_function`` node, in graph order."""
    return [node.target for node in graph_module.graph.nodes if node.op == "call_function"]


def placeholder_values(graph_module: torch.fx.GraphModule) -> list[Any]:
    """The example values Dynamo recorded for the graph inputs."""
    return [node.meta.get("example_value") for node in graph_module.graph.nodes
            if node.op == "placeholder"]


def other_device(device: torch.device) -> torch.device | None:
    """The device of the other type for a device-change case, or None when only one exists.

    An accelerator's other device is the host CPU; any other device's is the accelerator, if
    one is usable: a CUDA build on a machine without a GPU has ``cuda`` compiled in
    (``current_accelerator()``) but no device to put a tensor on.
    """
    accelerator = torch.accelerator.current_accelerator(check_available=True)
    if accelerator is None:
        return None
    return torch.device("cpu") if device.type == accelerator.type else accelerator


def guard_failure_reasons(fn: Callable[..., Any]) -> list[str]:
    """Why Dynamo's guards rejected a cached graph of ``fn`` (recorded on recompiles)."""
    failures = torch._dynamo.utils.guard_failures
    return [str(reason) for reason in failures.get(fn.__code__, ())]

