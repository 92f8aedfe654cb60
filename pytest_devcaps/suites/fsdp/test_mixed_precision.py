"""Mixed precision: bf16 parameters for compute, fp32 gradient reduction and fp32 sharded state."""

from __future__ import annotations

import copy

import pytest
import torch
from torch.distributed.fsdp import MixedPrecisionPolicy

from pytest_devcaps.distributed import DistributedRunner, RankContext
from pytest_devcaps.suites.fsdp._models import DIM, MLPStack, build, shard, world_mesh
from pytest_devcaps.suites.fsdp._parity import LR, assert_parity, average_gradients, batch, full, reference_of

STEPS = 3


def _bf16_with_fp32_reduce(ctx: RankContext) -> list[float]:
    model = build(MLPStack, 9, ctx.device)
    reference = reference_of(model)                              # fp32 master weights
    reference_bf16 = copy.deepcopy(reference).to(torch.bfloat16)  # what the forward runs on
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    shard(model, model.blocks, mesh=world_mesh(ctx.device), mp_policy=policy)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=LR)
    losses = []
    for step in range(STEPS):
        x = batch(20 * step + ctx.rank, ctx.device, 4, DIM)
        loss = model(x).sum()  # FSDP casts the floating-point inputs to param_dtype
        ref_loss = reference_bf16(x.to(torch.bfloat16)).sum()
        assert loss.dtype == torch.bfloat16
        torch.testing.assert_close(loss, ref_loss, msg=lambda m: f"step {step} loss: {m}")
        loss.backward()
        ref_loss.backward()
        for master, low in zip(reference.parameters(), reference_bf16.parameters()):
            master.grad = low.grad.float()  # reduce in fp32, as reduce_dtype says
            low.grad = None
        average_gradients(reference)
        for param in model.parameters():
            assert param.dtype == torch.float32 and param.grad.dtype == torch.float32
        assert_parity(reference, model, what=f"step {step} (fp32 sharded grads)", grads=True)
        opt.step()
        ref_opt.step()
        opt.zero_grad()
        ref_opt.zero_grad()
        with torch.no_grad():
            for master, low in zip(reference.parameters(), reference_bf16.parameters()):
                low.copy_(master)
        assert_parity(reference, model, what=f"after step {step}")
        losses.append(loss.item())
    assert all(full(p).dtype == torch.float32 for p in model.parameters())
    return losses


@pytest.mark.requires_capability("dtype.bf16")
def test_bf16_params_fp32_reduce(distributed: DistributedRunner) -> None:
    """bf16 compute with fp32 reduce-scatter matches a bf16-forward, fp32-update reference."""
    losses = distributed.run(_bf16_with_fp32_reduce, world_size=2)
    assert all(len(rank_losses) == STEPS for rank_losses in losses)
