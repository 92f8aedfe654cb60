"""Parity with a replicated reference: same init, same data, grads all-reduced (average)."""

from __future__ import annotations

import copy
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.tensor import DTensor

from pytest_devcaps.distributed import RankContext

LR = 1e-2


def full(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor: DTensors are gathered, plain tensors returned as they are."""
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def reference_of(model: nn.Module) -> nn.Module:
    """An unsharded replica (call before sharding ``model``)."""
    return copy.deepcopy(model)


def average_gradients(model: nn.Module, group: dist.ProcessGroup | None = None) -> None:
    """All-reduce grads and divide: ReduceOp.AVG is not offered by every backend (gloo)."""
    size = dist.get_world_size(group)
    for param in model.parameters():
        if param.grad is not None:
            dist.all_reduce(param.grad, op=dist.ReduceOp.SUM, group=group)
            param.grad.div_(size)


def batch(seed: int, device: torch.device, *shape: int) -> torch.Tensor:
    """Inputs from CPU RNG (identical on every device type), moved to ``device``."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=generator).to(device)


def tokens(seed: int, device: torch.device, vocab: int, *shape: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, shape, generator=generator).to(device)


def assert_parity(reference: nn.Module, sharded: nn.Module, *, what: str, grads: bool = False,
                  atol: float | None = None, rtol: float | None = None) -> None:
    """Every parameter (and optionally grad) of ``sharded`` equals the reference's, both gathered."""
    ref_params = dict(reference.named_parameters())
    sharded_params = dict(sharded.named_parameters())
    assert ref_params.keys() == sharded_params.keys(), (what, ref_params.keys() ^ sharded_params.keys())
    tol: dict[str, Any] = {} if atol is None else {"atol": atol, "rtol": rtol if rtol is not None else 0.0}
    for name, ref in ref_params.items():
        mine = sharded_params[name]
        torch.testing.assert_close(full(mine.detach()), full(ref.detach()), **tol,
                                   msg=lambda m: f"{what}: parameter {name}: {m}")
        if grads:
            assert (mine.grad is None) == (ref.grad is None), f"{what}: grad presence of {name}"
            if ref.grad is not None and mine.grad is not None:
                torch.testing.assert_close(full(mine.grad), full(ref.grad), **tol,
                                           msg=lambda m: f"{what}: grad of {name}: {m}")


def train_in_parity(ctx: RankContext, reference: nn.Module, sharded: nn.Module, *, steps: int,
                    forward_loss: Callable[[nn.Module, int], torch.Tensor], what: str,
                    lr: float = LR) -> list[float]:
    """``steps`` SGD steps on both models with this rank's data; losses and params must match."""
    ref_opt = torch.optim.SGD(reference.parameters(), lr=lr)
    opt = torch.optim.SGD(sharded.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        ref_loss = forward_loss(reference, step)
        loss = forward_loss(sharded, step)
        torch.testing.assert_close(loss, ref_loss, msg=lambda m: f"{what}: loss at step {step}: {m}")
        ref_loss.backward()
        loss.backward()
        average_gradients(reference)
        assert_parity(reference, sharded, what=f"{what}, step {step} grads", grads=True)
        ref_opt.step()
        opt.step()
        ref_opt.zero_grad(set_to_none=step % 2 == 0)
        opt.zero_grad(set_to_none=step % 2 == 0)
        losses.append(loss.item())
    assert_parity(reference, sharded, what=f"{what}, after {steps} steps")
    return losses
