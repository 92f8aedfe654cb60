"""Module initialisation: meta-device init, rank-0 broadcast init, placement on the test's device."""

from __future__ import annotations

from typing import Callable

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.tensor import DTensor, Shard, distribute_tensor

from pytest_devcaps.distributed import DistributedRunner, RankContext
from pytest_devcaps.suites.fsdp._models import DIM, MLPStack, PatternStack, build, shard, world_mesh
from pytest_devcaps.suites.fsdp._parity import assert_parity, batch, full, reference_of, train_in_parity

STEPS = 2


def _loss(ctx: RankContext) -> Callable[[nn.Module, int], torch.Tensor]:
    return lambda m, step: m(batch(10 * step + ctx.rank, ctx.device, 4, DIM)).sum()


def _reset_all(model: nn.Module) -> None:
    for module in model.modules():
        reset = getattr(module, "reset_parameters", None)
        if callable(reset):
            reset()


def _meta_init(ctx: RankContext) -> None:
    eager = build(PatternStack, 0, ctx.device)
    reference = reference_of(eager)
    mesh = world_mesh(ctx.device)
    shard(eager, eager.blocks, mesh=mesh)

    # the FSDP2 way: shard on meta, then materialise the shards and initialise them
    with torch.device("meta"):
        sharded_on_meta = PatternStack()
    shard(sharded_on_meta, sharded_on_meta.blocks, mesh=mesh)
    assert all(p.is_meta for p in sharded_on_meta.parameters())
    sharded_on_meta.to_empty(device=ctx.device)
    _reset_all(sharded_on_meta)
    assert_parity(eager, sharded_on_meta, what="shard on meta, to_empty, reset_parameters")

    # materialise before sharding
    with torch.device("meta"):
        materialised_first = PatternStack()
    materialised_first.to_empty(device=ctx.device)
    _reset_all(materialised_first)
    shard(materialised_first, materialised_first.blocks, mesh=mesh)
    assert_parity(eager, materialised_first, what="to_empty, reset_parameters, then shard")

    train_in_parity(ctx, reference, sharded_on_meta, steps=STEPS, forward_loss=_loss(ctx),
                    what="meta-initialised training")


def _rank0_broadcast_init(ctx: RankContext) -> None:
    # Only rank 0 has real weights, and every other rank's RNG differs: values must come from rank 0.
    if ctx.rank == 0:
        full_model = build(MLPStack, 7, ctx.device)
    else:
        with torch.device("meta"):
            full_model = MLPStack()
    reference = build(MLPStack, 100 + ctx.rank, ctx.device)  # wrong everywhere but rank 0...
    for name, param in reference.named_parameters():  # ...until it is broadcast
        if ctx.rank == 0:
            param.data.copy_(dict(full_model.named_parameters())[name])
        dist.broadcast(param.data, src=0)

    with torch.device("meta"):
        model = MLPStack()
    shard(model, model.blocks, mesh=world_mesh(ctx.device))
    full_sd = full_model.state_dict()
    sharded_sd = {}
    for name, meta_param in model.state_dict().items():
        source = full_sd[name] if ctx.rank == 0 else torch.empty(meta_param.shape, device=ctx.device)
        sharded_sd[name] = nn.Parameter(
            distribute_tensor(source, meta_param.device_mesh, meta_param.placements))  # scatter from 0
    model.load_state_dict(sharded_sd, assign=True)
    assert_parity(reference, model, what="rank-0 broadcast init")
    train_in_parity(ctx, reference, model, steps=STEPS, forward_loss=_loss(ctx),
                    what="broadcast-initialised training")


def _unmaterialised_error(ctx: RankContext) -> None:
    with torch.device("meta"):
        model = MLPStack()
    shard(model, model.blocks, mesh=world_mesh(ctx.device))
    with pytest.raises(RuntimeError, match="should be materialized from meta device"):
        model(batch(0, ctx.device, 2, DIM))


def _placement(ctx: RankContext) -> None:
    mesh = world_mesh(ctx.device)
    assert mesh.device_type == ctx.device_type
    torch.manual_seed(3)
    model = MLPStack()  # built on cpu: fully_shard moves it to the mesh's device
    model.register_buffer("steps", torch.zeros(()))
    full_shapes = {n: p.shape for n, p in model.named_parameters()}
    shard(model, model.blocks, mesh=mesh)
    for name, param in model.named_parameters():
        assert isinstance(param, DTensor), name
        assert param.placements == (Shard(0),), (name, param.placements)
        assert param.device == ctx.device and param.to_local().device == ctx.device, (name, param.device)
        assert param.shape == full_shapes[name]
        expected_rows = torch.chunk(torch.empty(full_shapes[name][0]), ctx.world_size)
        rows = expected_rows[ctx.rank].shape[0] if ctx.rank < len(expected_rows) else 0
        assert param.to_local().shape[0] == rows, (name, param.to_local().shape)
    assert model.steps.device == ctx.device
    out = model(batch(1, ctx.device, 2, DIM))
    assert out.device == ctx.device
    for name, param in model.named_parameters():
        assert full(param).device == ctx.device, name


def _init_cases(ctx: RankContext) -> list[str]:
    done = []
    for case in (_meta_init, _rank0_broadcast_init, _unmaterialised_error, _placement):
        case(ctx)
        done.append(case.__name__)
    return done


def test_module_initialisation(distributed: DistributedRunner) -> None:
    """Meta-device init (shard then materialise, or materialise then shard) equals eager init
    and trains in parity; rank-0 broadcast init equals rank 0's weights; an unmaterialised
    meta module is refused; sharded parameters live on the test's device."""
    done = distributed.run(_init_cases, world_size=2)
    assert done[0] == done[1] == ["_meta_init", "_rank0_broadcast_init", "_unmaterialised_error",
                                  "_placement"]
