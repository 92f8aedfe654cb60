"""A compiled training loop: blocks compiled with torch.compile (aot_eager) under fully_shard."""

from __future__ import annotations

import torch
from torch._dynamo.testing import CompileCounterWithBackend

from pytest_devcaps.distributed import DistributedRunner, RankContext
from pytest_devcaps.suites.fsdp._models import DIM, MLPStack, build, shard, world_mesh
from pytest_devcaps.suites.fsdp._parity import batch, reference_of, train_in_parity

STEPS = 3
BACKEND = "aot_eager"
"""Dynamo + AOTAutograd without a code generator: runs wherever eager runs."""


def _compiled_training(ctx: RankContext) -> dict[str, int]:
    torch._dynamo.reset()
    model = build(MLPStack, 11, ctx.device, n_blocks=2)
    reference = reference_of(model)
    counter = CompileCounterWithBackend(BACKEND)
    for block in model.blocks:
        block.compile(backend=counter)
    shard(model, model.blocks, mesh=world_mesh(ctx.device))
    train_in_parity(ctx, reference, model, steps=STEPS,
                    forward_loss=lambda m, s: m(batch(30 * s + ctx.rank, ctx.device, 4, DIM)).sum(),
                    what=f"compiled ({BACKEND})")
    return {"frames": counter.frame_count}


def test_compiled_training_parity(distributed: DistributedRunner) -> None:
    """Eager reference vs FSDP with compiled blocks: same losses and parameters every step."""
    results = distributed.run(_compiled_training, world_size=2)
    for result in results:
        assert result["frames"] >= 1, "nothing was compiled"
