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
    return probe_backend(device, "gloo")


def probe_backend(device: str, name: str) -> ProbeOutcome:
    """Backend ``name`` exists, and a 1-rank group of it all-reduces a tensor on the device,
    blocking and asynchronously (the Work object's ``wait``): what the backend does, asked of
    the backend. A vendor registers this for its own backend's capability (a module-level
    function calling it with the name: probes run in a child that imports them)."""
    missing = _availability(name)
    if missing is not None:
        return missing
    import torch.distributed as dist

    if dist.is_initialized():  # only when run in-process next to a live group
        return ran(f"{name} is available (a process group already exists; not re-tested)")
    with tempfile.TemporaryDirectory(prefix=f"devcaps-{name}-") as tmp:
        try:
            store = dist.FileStore(os.path.join(tmp, "store"), 1)  # type: ignore[attr-defined]
            dist.init_process_group(name, store=store, rank=0, world_size=1)
        except Exception as exc:
            return refused(f"init_process_group({name!r}) with 1 rank", exc)
        try:
            values = _all_reduce_twice(device)
        except Exception as exc:
            return refused(f"{name} all_reduce of a {device_type(device)} tensor", exc)
        finally:
            dist.destroy_process_group()
    if values != (2.0, 3.0):
        return unknown(f"1-rank {name} all_reduce gave {values}, expected (2.0, 3.0)")
    return ran(f"1-rank {name} group all-reduced a tensor on {device} (blocking and async)")


def _all_reduce_twice(device: str) -> tuple[float, float]:
    import torch
    import torch.distributed as dist

    blocking = torch.full((4,), 2.0, device=device)
    dist.all_reduce(blocking)
    later = torch.full((4,), 3.0, device=device)
    work = dist.all_reduce(later, async_op=True)
    assert work is not None
    work.wait()
    return float(blocking[0].item()), float(later[-1].item())


def probe_nccl(device: str) -> ProbeOutcome:
    return _backend_for_device(device, "nccl")


def probe_xccl(device: str) -> ProbeOutcome:
    return _backend_for_device(device, "xccl")


def probe_hccl(device: str) -> ProbeOutcome:
    return _backend_for_device(device, "hccl")


def probe_mpi(device: str) -> ProbeOutcome:
    return _backend_for_device(device, "mpi")
