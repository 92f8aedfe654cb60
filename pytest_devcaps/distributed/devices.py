"""Device count and selection for ranks, through the device-neutral runtime helpers."""

from __future__ import annotations

import torch


def device_count(device: torch.device | str) -> int:
    """Visible devices of this type (1 for cpu: every rank shares it)."""
    device_type = torch.device(device).type
    if device_type == "cpu":
        return 1
    try:
        from pytest_devcaps import runtime
    except ImportError:  # the runtime module is optional at this layer
        return int(torch.get_device_module(device_type).device_count())
    return int(runtime.device_count(device_type))


def set_device(device: torch.device) -> None:
    """Make ``device`` the current device of this process (accelerators only)."""
    try:
        from pytest_devcaps import runtime
    except ImportError:
        torch.get_device_module(device.type).set_device(device)
        return
    runtime.set_device(device)
