"""Sharded gradient scaling: DTensor grads, an inf on one rank skips the step on every rank."""

from __future__ import annotations

from typing import Any

import torch
from torch.amp.grad_scaler import OptState

from pytest_devcaps.distributed import DistributedRunner, RankContext
from pytest_devcaps.suites.fsdp._models import DIM, MLPStack, build, shard, world_mesh
from pytest_devcaps.suites.fsdp._parity import (
    LR,
    assert_parity,
    average_gradients,
    batch,
    full,
    reference_of,
)

INIT_SCALE = 2.0**10
BACKOFF = 0.5
INF_STEPS = {1: 1}
"""step -> the rank whose gradient gets an inf at that step."""
STEPS = 3


def _scaler(device_type: str) -> torch.amp.GradScaler:
    # The device type is explicit: GradScaler() means "cuda" and silently disables itself elsewhere.
    return torch.amp.GradScaler(device_type, init_scale=INIT_SCALE, backoff_factor=BACKOFF,
                                growth_interval=1000)


def _snapshot(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: full(t.detach()).clone() for name, t in tensors.items()}


def _scaled_training(ctx: RankContext) -> list[dict[str, Any]]:
    model = build(MLPStack, 1, ctx.device)
    reference = reference_of(model)
    shard(model, model.blocks, mesh=world_mesh(ctx.device))
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=LR)
    scaler, ref_scaler = _scaler(ctx.device_type), _scaler(ctx.device_type)
    assert scaler.is_enabled(), f"GradScaler({ctx.device_type!r}) disabled itself"
    history = []
    for step in range(STEPS):
        x = batch(50 + 10 * step + ctx.rank, ctx.device, 4, DIM)
        inject = INF_STEPS.get(step) == ctx.rank
        for module, s in ((model, scaler), (reference, ref_scaler)):
            s.scale(module(x).sum()).backward()
            if inject:
                param = next(module.parameters())
                local = param.grad.to_local() if hasattr(param.grad, "to_local") else param.grad
                local.view(-1)[0] = float("inf")
        average_gradients(reference)  # the inf reaches every rank's reference, as in FSDP
        params_before = _snapshot(dict(model.named_parameters()))
        grads_before = _snapshot({n: p.grad for n, p in model.named_parameters()})
        scale_before = scaler.get_scale()

        scaler.unscale_(opt)
        ref_scaler.unscale_(ref_opt)
        state = scaler._per_optimizer_states[id(opt)]
        assert state["stage"] is OptState.UNSCALED
        found_inf = sum(float(full(v).item()) for v in state["found_inf_per_device"].values())
        expect_inf = step in INF_STEPS
        assert found_inf == float(expect_inf), (step, ctx.rank, found_inf)
        if not expect_inf:
            inv_scale = 1.0 / scale_before
            for name, param in model.named_parameters():
                torch.testing.assert_close(full(param.grad), grads_before[name] * inv_scale,
                                           msg=lambda m: f"step {step}: unscaled grad {name}: {m}")
        scaler.step(opt)
        scaler.update()
        ref_scaler.step(ref_opt)
        ref_scaler.update()

        params_after = _snapshot(dict(model.named_parameters()))
        changed = [n for n in params_after if not torch.equal(params_after[n], params_before[n])]
        if expect_inf:
            assert not changed, f"step {step}: inf step changed {changed}"
            assert scaler.get_scale() == scale_before * BACKOFF
        else:
            assert changed, f"step {step}: finite step left every parameter unchanged"
            assert scaler.get_scale() == scale_before
        assert ref_scaler.get_scale() == scaler.get_scale()
        assert_parity(reference, model, what=f"step {step}")
        opt.zero_grad()
        ref_opt.zero_grad()
        history.append({"scale": scaler.get_scale(), "found_inf": found_inf,
                        "changed": len(changed)})
    return history


def test_sharded_grad_scaler(distributed: DistributedRunner) -> None:
    histories = distributed.run(_scaled_training, world_size=2)
    assert histories[0] == histories[1], "ranks disagree on the scaler's decisions"
    scales = [h["scale"] for h in histories[0]]
    assert scales == [INIT_SCALE, INIT_SCALE * BACKOFF, INIT_SCALE * BACKOFF]
