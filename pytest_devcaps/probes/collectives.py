"""Collective-communication backend probes (``torch.distributed``)."""

from __future__ import annotations

import importlib
import importlib.util
import os
import tempfile

from pytest_devcaps.model import ProbeOutcome
from pytest_devcaps.probes.base import device_type, ran, refused, unknown, unsupported
from pytest_devcaps.runtime import default_dist_backend


# Out-of-tree collective backends register themselves when this module is imported.
_REGISTERED_BY = {"hccl": "habana_frameworks.torch.distributed.hccl"}


def _import_provider(name: str) -> None:
    module = _REGISTERED_BY.get(name)
    if module is None:
        return
    try:
        if importlib.util.find_spec(module.split(".", 1)[0]) is not None:
            importlib.import_module(module)
    except Exception:
        pass  # then the backend stays unregistered and the probe says so


def _availability(name: str) -> ProbeOutcome | None:
    """An UNSUPPORTED outcome when the backend is missing from this build, else None."""
    import torch.distributed as dist

    if not dist.is_available():
        return unsupported("torch.distributed is not built into this torch")
    _import_provider(name)
    check = getattr(dist, "is_backend_available", None)
    available = check(name) if check else getattr(dist, f"is_{name}_available", lambda: False)()
    if not available:
        return unsupported(f"{name} is not available in this torch build")
    return None


def _backend_for_device(device: str, name: str) -> ProbeOutcome:
    import torch.distributed as dist

    missing = _availability(name)
    if missing is not None:
        return missing
    kind = device_type(device)
    handles = list(dist.Backend.backend_capability.get(name, ()))
    if handles and kind not in handles and default_dist_backend(kind) != name:
        return unsupported(f"{name} is available but handles {', '.join(handles)} tensors, "
                           f"not {kind}")
    return ran(f"{name} is available for {kind} tensors")


def probe_gloo(device: str) -> ProbeOutcome:
    """Gloo exists, and a 1-rank gloo group all-reduces a tensor on the device."""
    import torch
    import torch.distributed as dist

    missing = _availability("gloo")
    if missing is not None:
        return missing
    if dist.is_initialized():  # only when run in-process next to a live group
        return ran("gloo is available (a process group already exists; not re-tested)")
    with tempfile.TemporaryDirectory(prefix="devcaps-gloo-") as tmp:
        try:
            store = dist.FileStore(os.path.join(tmp, "store"), 1)  # type: ignore[attr-defined]
            dist.init_process_group("gloo", store=store, rank=0, world_size=1)
        except Exception as exc:
            return refused("init_process_group('gloo') with 1 rank", exc)
        try:
            tensor = torch.full((4,), 2.0, device=device)
            dist.all_reduce(tensor)
            value = tensor[0].item()
        except Exception as exc:
            return refused(f"gloo all_reduce of a {device_type(device)} tensor", exc)
        finally:
            dist.destroy_process_group()
    if value != 2.0:
        return unknown(f"1-rank gloo all_reduce gave {value}, expected 2.0")
    return ran(f"1-rank gloo group all-reduced a tensor on {device}")


def probe_nccl(device: str) -> ProbeOutcome:
    return _backend_for_device(device, "nccl")


def probe_xccl(device: str) -> ProbeOutcome:
    return _backend_for_device(device, "xccl")


def probe_hccl(device: str) -> ProbeOutcome:
    return _backend_for_device(device, "hccl")


def probe_mpi(device: str) -> ProbeOutcome:
    return _backend_for_device(device, "mpi")
