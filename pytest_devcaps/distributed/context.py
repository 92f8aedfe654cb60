"""What a rank body sees: its rank, the world size, its device and the backend."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pytest_devcaps.errors import DeviceRuntimeError


@dataclass(frozen=True)
class RankContext:
    """Passed as the first argument to every function run by ``distributed.run``.

    ``device`` is this rank's device: ``cpu`` on CPU, ``<type>:<local_rank mod count>`` on
    accelerators. ``spawned`` is False when the ranks come from an outside launcher (torchrun).
    """

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str
    spawned: bool = True

    @property
    def device_type(self) -> str:
        return self.device.type


def rank_device(device: torch.device | str, local_rank: int, count: int) -> torch.device:
    """The device a rank uses: cpu stays cpu, accelerators use index ``local_rank mod count``."""
    device = torch.device(device)
    if device.type == "cpu":
        return device
    if count < 1:
        raise DeviceRuntimeError(f"no {device.type} device visible to rank {local_rank}")
    return torch.device(device.type, local_rank % count)
