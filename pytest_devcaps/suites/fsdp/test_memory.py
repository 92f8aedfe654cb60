"""Memory and overlap: resharding frees unsharded parameters (any device); peak memory against a
formula, memory back to baseline and compute/communication overlap (accelerators with the
capabilities named by the markers)."""

from __future__ import annotations

import gc
from typing import Any

import pytest
import torch
import torch.nn as nn
from torch.distributed.tensor import DTensor

from pytest_devcaps import runtime
from pytest_devcaps.distributed import DistributedRunner, RankContext
from pytest_devcaps.suites.fsdp._models import DIM, MLPStack, build, shard, world_mesh
from pytest_devcaps.suites.fsdp._parity import batch

MB = 2**20


def _record_unsharded(model: MLPStack) -> dict[int, list[torch.Tensor]]:
    """During each block's forward, keep the unsharded parameters FSDP registered for it."""
    seen: dict[int, list[torch.Tensor]] = {}
    for i, block in enumerate(model.blocks):
        def grab(module: nn.Module, args: Any, i: int = i) -> None:
            seen[i] = [p for p in module.parameters()]
        block.in_proj.register_forward_pre_hook(grab)
    return seen


def _storage_bytes(tensors: list[torch.Tensor]) -> int:
    return sum(t.untyped_storage().size() for t in tensors)


def _reshard_frees(ctx: RankContext) -> dict[str, dict[str, int]]:
    report = {}
    for reshard in (True, False):
        model = build(MLPStack, 0, ctx.device, n_blocks=2)
        shard(model, model.blocks, mesh=world_mesh(ctx.device), reshard_after_forward=reshard)
        seen = _record_unsharded(model)
        out = model(batch(ctx.rank, ctx.device, 4, DIM))
        unsharded = [t for ts in seen.values() for t in ts]
        assert unsharded and not any(isinstance(t, DTensor) for t in unsharded)
        full_bytes = sum(t.numel() * t.element_size() for t in unsharded)
        after_forward = _storage_bytes(unsharded)
        block_params = [p for block in model.blocks for p in block.parameters()]
        if reshard:
            assert after_forward == 0, f"reshard_after_forward=True kept {after_forward} bytes"
            assert all(isinstance(p, DTensor) for p in block_params)
        else:
            assert after_forward >= full_bytes, (after_forward, full_bytes)
            assert not any(isinstance(p, DTensor) for p in block_params)
        out.sum().backward()
        after_backward = _storage_bytes(unsharded)
        assert after_backward == 0, f"reshard after backward kept {after_backward} bytes"
        assert all(isinstance(p, DTensor) for p in model.parameters())
        report[f"reshard_after_forward={reshard}"] = {
            "unsharded": full_bytes, "after_forward": after_forward, "after_backward": after_backward}
    return report


def test_reshard_frees_unsharded_parameters(distributed: DistributedRunner) -> None:
    """After forward (reshard_after_forward=True) and after backward, the all-gathered
    parameters' storages are freed (size 0) and the sharded DTensors are registered again."""
    reports = distributed.run(_reshard_frees, world_size=2)
    for report in reports:
        assert report["reshard_after_forward=False"]["after_forward"] > 0


# --- accelerator memory accounting -------------------------------------------------------------

BIG_DIM = 512
BIG_BLOCKS = 4
BIG_BATCH = 64
SLACK_MB = 4.0
"""Allocator rounding, the head's parameters and the loss: small next to one 4 MB block."""


def _allocated_mb(device: torch.device) -> float:
    return runtime.memory_allocated(device) / MB


def _peak_mb(device: torch.device) -> float:
    return runtime.max_memory_allocated(device) / MB


def _reset_linears(model: nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, nn.Linear):
            module.reset_parameters()


def _peak_memory(ctx: RankContext) -> dict[str, float]:
    device = ctx.device
    runtime.synchronize(device)
    runtime.empty_cache(device)
    base = _allocated_mb(device)
    with torch.device("meta"):
        model = MLPStack(n_blocks=BIG_BLOCKS, dim=BIG_DIM)
    param_mb = sum(p.numel() * p.element_size() for p in model.parameters()) / MB
    block_mb = sum(p.numel() * p.element_size() for p in model.blocks[0].parameters()) / MB
    shard(model, model.blocks, mesh=world_mesh(device))
    model.to_empty(device=device)
    _reset_linears(model)  # in a function: a loop variable here would keep a module (and
    # through its FSDP state every sharded parameter) alive past the deletion checked below
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    runtime.synchronize(device)
    init = _allocated_mb(device) - base
    sharded_mb = param_mb / ctx.world_size
    # Sharded parameters only, plus padding of uneven shards (at most one row each).
    assert sharded_mb * 0.99 <= init <= sharded_mb + 1.0, (init, sharded_mb)

    x = torch.randn(BIG_BATCH, BIG_DIM, device=device)
    act_mb = x.numel() * x.element_size() / MB
    activations_mb = BIG_BLOCKS * 4 * act_mb + 4 * act_mb  # saved per block (in, hidden x2, out)
    runtime.reset_peak_memory_stats(device)
    loss = model(x).sum()
    runtime.synchronize(device)
    forward_peak = _peak_mb(device) - base
    # sharded params + up to three blocks in flight (current, prefetched output and its copy-in
    # buffer, which is a whole block at world size 1) + activations + the head
    forward_bound = init + 3 * block_mb + activations_mb + SLACK_MB
    assert forward_peak <= forward_bound, (forward_peak, forward_bound)

    runtime.reset_peak_memory_stats(device)
    loss.backward()
    runtime.synchronize(device)
    backward_peak = _peak_mb(device) - base
    # + sharded grads, and in flight: three blocks of unsharded params (as in forward) and two of
    # unsharded grads (the block's own and the reduce-scatter input)
    backward_bound = init + sharded_mb + 3 * block_mb + 2 * block_mb + activations_mb + SLACK_MB
    assert backward_peak <= backward_bound, (backward_peak, backward_bound)

    runtime.reset_peak_memory_stats(device)
    opt.step()
    opt.zero_grad(set_to_none=True)
    runtime.synchronize(device)
    step_peak = _peak_mb(device) - base
    assert step_peak <= init + sharded_mb + 1.0, (step_peak, init, sharded_mb)

    del model, opt, loss, x
    gc.collect()
    runtime.synchronize(device)
    runtime.empty_cache(device)
    after_delete = _allocated_mb(device) - base
    assert after_delete <= 0.5, f"{after_delete:.2f} MB still allocated after deleting the model"
    return {"init": init, "forward_peak": forward_peak, "backward_peak": backward_peak,
            "step_peak": step_peak, "after_delete": after_delete}


@pytest.mark.requires_capability("runtime.memory_stats")
def test_peak_memory_follows_formula(distributed: DistributedRunner) -> None:
    """Peak memory after init, forward, backward and step stays within the FSDP formula, and
    deleting the model gives the memory back."""
    distributed.run(_peak_memory, world_size=distributed.world_size_up_to(2))


OVERLAP_SLACK = 1.25


def _time_ms(device: torch.device, fn: Any, repeats: int) -> float:
    start = torch.Event(device=device, enable_timing=True)
    end = torch.Event(device=device, enable_timing=True)
    fn()  # warm-up
    runtime.synchronize(device)
    start.record()
    for _ in range(repeats):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / repeats


def _overlap(ctx: RankContext) -> dict[str, float]:
    device = ctx.device
    model = build(MLPStack, 0, device, n_blocks=BIG_BLOCKS, dim=BIG_DIM)
    shard(model, model.blocks, mesh=world_mesh(device))
    x = torch.randn(BIG_BATCH, BIG_DIM, device=device)

    def step() -> None:
        model(x).sum().backward()

    overlapped = _time_ms(device, step, repeats=5)
    # serial: wait for every outstanding collective and kernel before each block runs
    handles = [block.register_forward_pre_hook(lambda *_: runtime.synchronize(device))
               for block in model.blocks]
    serial = _time_ms(device, step, repeats=5)
    for handle in handles:
        handle.remove()
    return {"overlapped_ms": overlapped, "serial_ms": serial}


# native: overlap needs streams that run concurrently; emulated streams (emu's run in order,
# each at once) keep the API, and timing them measures the machine's load, not FSDP.
@pytest.mark.requires_capability("runtime.streams", "runtime.events", native=True)
def test_overlap_not_slower_than_serial(distributed: DistributedRunner) -> None:
    """FSDP's all-gather/reduce-scatter streams overlap compute: a step is not slower than the
    same step with a device synchronisation before every block."""
    for timing in distributed.run(_overlap, world_size=distributed.world_size_up_to(2)):
        # loose on purpose: timing on shared machines is noisy
        assert timing["overlapped_ms"] <= timing["serial_ms"] * OVERLAP_SLACK, timing
