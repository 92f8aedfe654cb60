"""Small models for the FSDP suite; every one builds identically on any device from a seed."""

from __future__ import annotations

from typing import Any, Iterable, TypeVar

import torch
import torch.nn as nn
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor, distribute_tensor

DIM = 16
ModuleT = TypeVar("ModuleT", bound=nn.Module)


class MLP(nn.Module):
    """Two linears with a ReLU; ``dim`` deliberately odd-friendly so shards can be uneven."""

    def __init__(self, dim: int = DIM) -> None:
        super().__init__()
        self.in_proj = nn.Linear(dim, 2 * dim)
        self.out_proj = nn.Linear(2 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out_proj(torch.relu(self.in_proj(x)))


class MLPStack(nn.Module):
    """Residual MLP blocks and a head: each block is one FSDP group when wrapped nested."""

    def __init__(self, n_blocks: int = 3, dim: int = DIM) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(MLP(dim) for _ in range(n_blocks))
        self.head = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = x + block(x)
        return self.head(x)


class TiedLM(nn.Module):
    """Embedding whose weight is tied to the output projection (shared parameter)."""

    def __init__(self, vocab: int = 24, dim: int = DIM, n_blocks: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(MLP(dim) for _ in range(n_blocks))
        self.out = nn.Linear(dim, vocab, bias=False)
        self.out.weight = self.embed.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = x + block(x)
        return self.out(x)


class StructuredIO(nn.Module):
    """Takes a dict of tensors and a list of tensors, returns a dict (container inputs/outputs)."""

    def __init__(self, dim: int = DIM) -> None:
        super().__init__()
        self.left = MLP(dim)
        self.right = MLP(dim)

    def forward(self, named: dict[str, torch.Tensor], extra: list[torch.Tensor]) -> dict[str, Any]:
        x = self.left(named["x"]) + self.right(named["y"])
        return {"out": x * extra[0], "aux": [extra[1].sum()]}


def pattern(shape: torch.Size, salt: int) -> torch.Tensor:
    """A fixed, non-constant CPU tensor: init values that need no RNG, so any device agrees."""
    numel = int(torch.Size(shape).numel())
    return (torch.sin(torch.arange(numel, dtype=torch.float32) * 0.37 + salt) * 0.2).reshape(shape)


def fill_from_full(param: torch.Tensor, value: torch.Tensor) -> None:
    """Write ``value`` (the whole tensor, on CPU) into ``param``, which may be a sharded DTensor."""
    with torch.no_grad():
        if isinstance(param, DTensor):
            local = distribute_tensor(value.to(param.device), param.device_mesh, param.placements,
                                      src_data_rank=None)  # every rank holds value: no comm
            param.to_local().copy_(local.to_local())
        else:
            param.copy_(value)


class PatternLinear(nn.Linear):
    """``nn.Linear`` whose ``reset_parameters`` writes a deterministic pattern, sharded or not."""

    def reset_parameters(self) -> None:
        if self.weight.is_meta:
            return
        fill_from_full(self.weight, pattern(self.weight.shape, self.in_features))
        if self.bias is not None:
            fill_from_full(self.bias, pattern(self.bias.shape, self.out_features + 1))


class PatternStack(nn.Module):
    """Blocks of two :class:`PatternLinear`: the model for meta-device initialisation."""

    def __init__(self, n_blocks: int = 2, dim: int = DIM) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(PatternLinear(dim, 2 * dim + 1), nn.ReLU(), PatternLinear(2 * dim + 1, dim))
            for _ in range(n_blocks))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = x + block(x)
        return x


def build(cls: type[ModuleT], seed: int, device: torch.device, **kwargs: Any) -> ModuleT:
    """``cls(**kwargs)`` initialised from CPU RNG with ``seed``, then moved: same values everywhere."""
    torch.manual_seed(seed)
    return cls(**kwargs).to(device)


def world_mesh(device: torch.device) -> DeviceMesh:
    """A 1-D mesh of every rank on ``device``'s type.

    Always pass a mesh: FSDP's default mesh is on the current accelerator, which would put a
    CPU (gloo) test instance onto a GPU on machines that have both.
    """
    return init_device_mesh(device.type, (dist.get_world_size(),))


def shard(model: nn.Module, submodules: Iterable[nn.Module], *, mesh: DeviceMesh,
          reshard_after_forward: bool | int = True,
          mp_policy: MixedPrecisionPolicy | None = None) -> FSDPModule:
    """``fully_shard`` each submodule, then the root; returns the root."""
    kwargs: dict[str, Any] = {"mesh": mesh, "reshard_after_forward": reshard_after_forward}
    if mp_policy is not None:
        kwargs["mp_policy"] = mp_policy
    for module in submodules:
        fully_shard(module, **kwargs)
    fully_shard(model, **kwargs)
    assert isinstance(model, FSDPModule)
    return model
