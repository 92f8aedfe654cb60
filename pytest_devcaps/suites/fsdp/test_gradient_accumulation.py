"""Gradient accumulation: no-sync microbatches then a synced one equal one step on the whole batch."""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.debug import CommDebugMode

from pytest_devcaps.distributed import DistributedRunner, RankContext
from pytest_devcaps.suites.fsdp._models import DIM, MLPStack, build, shard
from pytest_devcaps.suites.fsdp._parity import LR, assert_parity, average_gradients, batch, reference_of

N_BLOCKS = 2
MICROBATCHES = 3
MICROBATCH_SIZE = 4


def _short_counts(comm: CommDebugMode) -> dict[str, int]:
    counts: dict[str, int] = {}
    for op, count in comm.get_comm_counts().items():
        name = str(op).split(".")[-1].strip("_")
        counts[name] = counts.get(name, 0) + count
    return counts


def _accumulate(ctx: RankContext, cases: list[tuple[tuple[int, ...], bool | int]]) -> list[dict[str, Any]]:
    """Per case (mesh shape, reshard_after_forward): losses, collective counts per microbatch."""
    results = []
    for mesh_shape, reshard in cases:
        what = f"mesh {mesh_shape}, reshard_after_forward={reshard}"
        names = ("replicate", "shard") if len(mesh_shape) == 2 else ("shard",)
        mesh = init_device_mesh(ctx.device_type, mesh_shape, mesh_dim_names=names)
        model = build(MLPStack, 0, ctx.device, n_blocks=N_BLOCKS)
        reference = reference_of(model)
        shard(model, model.blocks, mesh=mesh, reshard_after_forward=reshard)
        data = [batch(1000 * ctx.rank + i, ctx.device, MICROBATCH_SIZE, DIM)
                for i in range(MICROBATCHES)]
        counts, losses = [], []
        for i, x in enumerate(data):
            model.set_requires_gradient_sync(i == MICROBATCHES - 1)
            with CommDebugMode() as comm:  # one per forward+backward (longer spans break its tracker)
                loss = model(x).sum()
                loss.backward()
            counts.append(_short_counts(comm))
            losses.append(loss.detach())
        with torch.no_grad():
            for i, x in enumerate(data):
                torch.testing.assert_close(losses[i], reference(x).sum(),
                                           msg=lambda m: f"{what}: microbatch {i} loss: {m}")
        ref_loss = reference(torch.cat(data)).sum()
        ref_loss.backward()
        average_gradients(reference)
        torch.testing.assert_close(sum(losses), ref_loss.detach(),
                                   msg=lambda m: f"{what}: summed microbatch losses: {m}")
        assert_parity(reference, model, what=f"{what}: accumulated grads", grads=True)
        torch.optim.SGD(model.parameters(), lr=LR).step()
        torch.optim.SGD(reference.parameters(), lr=LR).step()
        assert_parity(reference, model, what=f"{what}: after the step")
        results.append({"mesh": mesh_shape, "reshard": reshard, "counts": counts,
                        "losses": [loss.item() for loss in losses]})
    return results


def expected_counts(reshard: bool | int, synced: bool, hsdp: bool) -> dict[str, int]:
    """Collectives per microbatch: every group all-gathers in forward, again in backward when
    resharded after forward, and reduce-scatters (HSDP: plus all-reduces) only when synced."""
    groups = N_BLOCKS + 1
    counts = {"allgather_base": groups * (2 if reshard else 1)}
    if synced:
        counts["reduce_scatter_base"] = groups
        if hsdp:
            counts["allreduce"] = groups
    return counts


def _check(results: list[list[dict[str, Any]]]) -> None:
    for rank_results in results:
        for case in rank_results:
            hsdp = len(case["mesh"]) == 2
            for i, counts in enumerate(case["counts"]):
                expected = expected_counts(case["reshard"], i == MICROBATCHES - 1, hsdp)
                assert counts == expected, (case["mesh"], case["reshard"], i, counts)


def test_gradient_accumulation(distributed: DistributedRunner) -> None:
    cases = [((2,), True), ((2,), False)]
    _check(distributed.run(_accumulate, cases, world_size=2))


def test_gradient_accumulation_partial_reshard_and_hsdp(distributed: DistributedRunner) -> None:
    """reshard_after_forward=2 (reshard to half the world) and a 2x2 HSDP mesh need 4 ranks."""
    cases = [((4,), 2), ((2, 2), True)]
    _check(distributed.run(_accumulate, cases, world_size=4))
