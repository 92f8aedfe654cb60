"""An FSDP2 training step on 2 emu ranks (emuccl) equals the same step on 2 CPU ranks (gloo):
loss, gradients and updated parameters, fp32, within 1e-6; and the harness picks emuccl."""

from __future__ import annotations

from typing import Callable

import pytest

PARITY = '''
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from pytest_devcaps.distributed import DistributedRunner


def train_step(ctx):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 33), nn.ReLU(), nn.Linear(33, 8)).to(ctx.device)
    mesh = init_device_mesh(ctx.device_type, (ctx.world_size,))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)  # 33 rows: uneven shards, padded
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(100 + ctx.rank)
    x = torch.randn(4, 16, generator=generator).to(ctx.device)
    loss = model(x).pow(2).mean()
    loss.backward()
    grads = {n: p.grad.full_tensor().cpu() for n, p in model.named_parameters()}
    optimizer.step()
    params = {n: p.full_tensor().cpu() for n, p in model.named_parameters()}
    return {"loss": loss.item(), "grads": grads, "params": params,
            "backend": dist.get_backend(), "device": str(ctx.device),
            "grad_device": next(model.parameters()).grad.device.type}


def test_emu_step_equals_cpu_step(distributed):
    emu = distributed.run(train_step, world_size=2)
    cpu = DistributedRunner("cpu", "gloo").run(train_step, world_size=2)
    assert [r["backend"] for r in emu] == ["emuccl", "emuccl"]
    assert [r["device"] for r in emu] == ["emu:0", "emu:1"]
    assert {r["grad_device"] for r in emu} == {"emu"}
    for rank, (mine, theirs) in enumerate(zip(emu, cpu)):
        assert abs(mine["loss"] - theirs["loss"]) <= 1e-6, (rank, mine["loss"], theirs["loss"])
        for kind in ("grads", "params"):
            assert mine[kind].keys() == theirs[kind].keys()
            for name, value in theirs[kind].items():
                torch.testing.assert_close(mine[kind][name], value, atol=1e-6, rtol=0,
                                           msg=lambda m: f"rank {rank} {kind} {name}: {m}")
        assert any(g.abs().sum() > 0 for g in mine["grads"].values())
    assert emu[0]["loss"] != emu[1]["loss"]  # each rank had its own data
'''


def test_fsdp2_step_on_emu_equals_the_cpu_step(emu_env: Callable[[int], None],
                                               pytester: pytest.Pytester) -> None:
    emu_env(2)
    pytester.makepyfile(test_parity=PARITY)
    result = pytester.runpytest_subprocess("-p", "pytest_devcaps", "--devcaps-devices=emu", "-q",
                                           "-rfEs", "-p", "no:randomly")
    result.assert_outcomes(passed=1)


DTENSOR_RANDOM = '''
import torch
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard


def sharded_init(ctx):
    torch.manual_seed(3)
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(8, 64), nn.Linear(64, 4))
    fully_shard(model, mesh=init_device_mesh(ctx.device_type, (ctx.world_size,)))
    model.to_empty(device=ctx.device)
    for layer in model:
        layer.reset_parameters()  # DTensor random ops: the RNG tracker reads emu's state
    local = {n: p.to_local().cpu() for n, p in model.named_parameters()}
    after = torch.get_device_module(ctx.device_type).get_rng_state()
    return {"local": local, "after": after.cpu(), "next": torch.rand(2, device=ctx.device).cpu()}


def test_sharded_random_init(distributed):
    first = distributed.run(sharded_init, world_size=2)
    again = distributed.run(sharded_init, world_size=2)
    for rank in range(2):
        for name, value in first[rank]["local"].items():
            assert torch.equal(value, again[rank]["local"][name]), (rank, name)
            assert value.abs().sum() > 0, (rank, name)
    weight = "0.weight"
    assert not torch.equal(first[0]["local"][weight], first[1]["local"][weight])
    assert torch.equal(first[0]["after"], first[1]["after"])
    assert torch.equal(first[0]["next"], first[1]["next"])
'''


def test_dtensor_random_init_on_emu_is_deterministic_and_keeps_ranks_in_step(
        emu_env: Callable[[int], None], pytester: pytest.Pytester) -> None:
    """reset_parameters after fully_shard (DTensor random ops, which read the device's RNG state as
    a Philox (seed, offset) pair): runs on 2 emu ranks, gives each rank its own shard values, the
    same in a second run, and leaves both ranks at the same RNG state."""
    emu_env(2)
    pytester.makepyfile(test_dtensor_random=DTENSOR_RANDOM)
    result = pytester.runpytest_subprocess("-p", "pytest_devcaps", "--devcaps-devices=emu", "-q",
                                           "-rfEs", "-p", "no:randomly")
    result.assert_outcomes(passed=1)
