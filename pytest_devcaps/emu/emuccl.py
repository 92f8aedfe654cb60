"""``emuccl``: emu's ``torch.distributed`` backend, registered for the emu device type.

The backend is C++ (``csrc/emu_c10d.cpp``, ``EmuBackend``): a ``c10d::Backend`` that runs each
collective through gloo over the host memory emu tensors live in (no copy) and returns
asynchronous Work objects whose results and futures hold the emu tensors. Why gloo underneath
and C++ around it is said there. Here it is registered through c10d's public registration,
``Backend.register_backend(name, creator, devices=[...])`` (torch/distributed/distributed_c10d.py),
so that

* ``dist.get_default_backend_for_device("emu")`` answers ``"emuccl"`` (the devices list fills
  ``Backend.default_device_backend_map`` for emu; the CPU keeps gloo);
* ``init_process_group("emuccl")`` (or ``"cpu:gloo,emu:emuccl"``) works for emu ranks. Both
  device types are registered: one group then serves the emu tensors of the collectives and the
  CPU tensors of ``barrier`` and the object collectives (``all_gather_object``), which c10d puts
  on the CPU; CPU tensors go to gloo unchanged.

A vendor's package does the same with its own backend class: register it in the code its torch
autoload entry point runs (:func:`pytest_devcaps.emu.autoload.load` calls :func:`register`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pytest_devcaps.emu import NAME

#: The backend's name (``dist.Backend.EMUCCL``), as for nccl, xccl and hccl.
BACKEND = "emuccl"
#: The device types one emuccl group serves.
DEVICES = ("cpu", NAME)


def register() -> None:
    """Register emuccl with c10d (once per process; the autoload calls it)."""
    import torch.distributed as dist

    if not dist.is_available() or BACKEND in dist.Backend.backend_list:
        return
    dist.Backend.register_backend(BACKEND, create_backend, devices=list(DEVICES))


def create_backend(store: Any, rank: int, world_size: int, timeout: timedelta) -> Any:
    """c10d's creator (``register_backend``'s ``func``): gloo over the group's store, then the
    emu backend around it."""
    import torch.distributed as dist

    from pytest_devcaps.emu._native import module

    host = dist.ProcessGroupGloo(store, rank, world_size, timeout)
    return module().EmuBackend(host)


def probe_emuccl(device: str) -> Any:
    """The probe of ``dist.emuccl`` (registered by :mod:`pytest_devcaps.emu.vendor_hooks`): a
    1-rank emuccl group all-reduces a tensor on ``device``, blocking and asynchronously."""
    import torch.distributed as dist

    from pytest_devcaps.probes.base import unsupported
    from pytest_devcaps.probes.collectives import probe_backend

    if dist.is_available() and BACKEND not in dist.Backend.backend_list:
        from pytest_devcaps._util.environ import ENV_EMU_DEVICES

        return unsupported(f"{BACKEND} is registered by the emu backend as it loads, and this "
                           f"process did not load it ({ENV_EMU_DEVICES} is unset)")
    return probe_backend(device, BACKEND)
