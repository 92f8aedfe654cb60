"""Execution and wrapping: wrapping layouts, forward patterns, container inputs, tied parameters."""

from __future__ import annotations

from typing import Callable

import pytest
import torch
import torch.nn as nn
from torch.distributed.fsdp import FSDPModule, fully_shard

from pytest_devcaps.distributed import DistributedRunner, RankContext
from pytest_devcaps.suites.fsdp._models import DIM, MLPStack, StructuredIO, TiedLM, build, shard, world_mesh
from pytest_devcaps.suites.fsdp._parity import batch, reference_of, tokens, train_in_parity

STEPS = 3
BATCH = 4
VOCAB = 24


def _stack_case(ctx: RankContext, case: str) -> list[float]:
    model = build(MLPStack, 2, ctx.device, n_blocks=3)
    reference = reference_of(model)
    mesh = world_mesh(ctx.device)
    blocks: list[FSDPModule] = []
    if case != "root_only":
        for block in model.blocks:
            blocks.append(fully_shard(block, mesh=mesh))
    fully_shard(model, mesh=mesh)
    if case == "explicit_prefetch":
        for i, block in enumerate(blocks):
            block.set_modules_to_forward_prefetch(blocks[i + 1:i + 2])
            block.set_modules_to_backward_prefetch(blocks[max(i - 1, 0):i] if i else [])

    def data(step: int, k: int = 0) -> torch.Tensor:
        return batch(100 * step + 10 * ctx.rank + k, ctx.device, BATCH, DIM)

    loss_fns: dict[str, Callable[[nn.Module, int], torch.Tensor]] = {
        "multi_forward": lambda m, s: m(data(s)).sum() + m(data(s, 1)).pow(2).mean(),
        # a non-root module run on its own (the root has run once, for lazy init, at step 0)
        "non_root_forward": lambda m, s: (m(data(s)).sum() if s == 0
                                          else m.blocks[1](data(s)).sum()),
    }
    loss_fn = loss_fns.get(case, lambda m, s: m(data(s)).sum())
    return train_in_parity(ctx, reference, model, steps=STEPS, forward_loss=loss_fn, what=case)


def _stack_cases(ctx: RankContext, cases: list[str]) -> dict[str, list[float]]:
    return {case: _stack_case(ctx, case) for case in cases}


def test_wrapping_and_forward_patterns(distributed: DistributedRunner) -> None:
    """Nested vs root-only wrapping, explicit prefetching, several forwards before one backward,
    and forward/backward through a non-root module: parity with the reference every step."""
    cases = ["nested", "root_only", "explicit_prefetch", "multi_forward", "non_root_forward"]
    per_rank = distributed.run(_stack_cases, cases, world_size=2)
    for losses in per_rank:
        assert set(losses) == set(cases)
        assert all(len(v) == STEPS for v in losses.values())
    # same init and data: the two wrappings train identically
    assert per_rank[0]["nested"] == pytest.approx(per_rank[0]["root_only"])


def _containers_and_tying(ctx: RankContext) -> dict[str, list[float]]:
    losses = {}

    model = build(StructuredIO, 3, ctx.device)
    reference = reference_of(model)
    mesh = world_mesh(ctx.device)
    shard(model, [model.left, model.right], mesh=mesh)

    def structured_loss(m: nn.Module, step: int) -> torch.Tensor:
        seed = 100 * step + 10 * ctx.rank
        named = {"x": batch(seed, ctx.device, BATCH, DIM), "y": batch(seed + 1, ctx.device, BATCH, DIM)}
        out = m(named, [batch(seed + 2, ctx.device, BATCH, DIM), batch(seed + 3, ctx.device, 3)])
        return out["out"].sum() + out["aux"][0]

    losses["dict_list_inputs"] = train_in_parity(ctx, reference, model, steps=STEPS,
                                                 forward_loss=structured_loss, what="dict/list inputs")

    def token_loss(m: nn.Module, step: int) -> torch.Tensor:
        return m(tokens(100 * step + ctx.rank, ctx.device, VOCAB, BATCH, 5)).logsumexp(-1).mean()

    for case in ("tied_in_root", "tied_grouped"):
        lm = build(TiedLM, 4, ctx.device, vocab=VOCAB)
        reference = reference_of(lm)
        assert reference.out.weight is reference.embed.weight
        for block in lm.blocks:
            fully_shard(block, mesh=mesh)
        if case == "tied_grouped":  # both users of the shared weight in one group
            fully_shard([lm.embed, lm.out], mesh=mesh)
        fully_shard(lm, mesh=mesh)
        assert lm.out.weight is lm.embed.weight
        losses[case] = train_in_parity(ctx, reference, lm, steps=STEPS, forward_loss=token_loss,
                                       what=case)

    lm = build(TiedLM, 4, ctx.device, vocab=VOCAB)
    with pytest.raises(ValueError, match="already managed by another FSDP group"):
        fully_shard(lm.embed, mesh=mesh)
        fully_shard(lm.out, mesh=mesh)
        fully_shard(lm, mesh=mesh)
        token_loss(lm, 0).backward()

    twice = build(MLPStack, 5, ctx.device)
    fully_shard(twice.blocks[0], mesh=mesh)
    with pytest.raises(AssertionError, match="can only be applied to a module once"):
        fully_shard(twice.blocks[0], mesh=mesh)
    return losses


def test_container_inputs_and_tied_parameters(distributed: DistributedRunner) -> None:
    """Dict/list inputs and outputs, a weight tied inside one group (root or an explicit
    multi-module group), and the errors for a parameter or module managed twice."""
    per_rank = distributed.run(_containers_and_tying, world_size=2)
    assert set(per_rank[0]) == {"dict_list_inputs", "tied_in_root", "tied_grouped"}
    assert per_rank[0]["tied_in_root"] == pytest.approx(per_rank[0]["tied_grouped"])
