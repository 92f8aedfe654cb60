"""Accelerators split between pytest-xdist workers (``--devcaps-pin-workers``).

Each worker gets its own slice of every accelerator type through the backend's visible-devices
variable (``BackendAdapter.visible_devices_variable``: ``CUDA_VISIBLE_DEVICES``,
``HIP_VISIBLE_DEVICES``, ``ZE_AFFINITY_MASK``, ``HABANA_VISIBLE_MODULES``...), set in the
worker's environment before it starts, so torch in the worker, and every rank a ``distributed``
test spawns from it, sees only that slice, renumbered from 0 (torch ``_parse_visible_devices`` in
``torch/cuda/__init__.py`` and ``torch/xpu/__init__.py``). Slices are disjoint while there are
at least as many devices as workers; with more workers, worker ``w`` shares device
``w mod count``. A value the user already set is split entry by entry (its entries may be
indices or UUIDs); a type without a variable is pinned with ``set_device`` instead.

Everything here is decided in the xdist controller, so a problem is one usage error there.
Pure functions of a registry and the environment: no pytest, no xdist.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from pytest_devcaps.errors import ConfigError
from pytest_devcaps.model import CapabilityRecord, DeviceIdentity
from pytest_devcaps.registry.query import CapabilityRegistry


@dataclass(frozen=True)
class TypePlan:
    """How one accelerator type is split: through ``variable`` over ``entries`` (one entry per
    device, in torch's order), or with ``set_device`` when ``variable`` is None."""

    type: str
    count: int
    variable: str | None
    entries: tuple[str, ...]
    user_set: bool = False


@dataclass(frozen=True)
class WorkerSlice:
    """One worker's devices of one type, as indices in the controller's numbering."""

    type: str
    indices: tuple[int, ...]
    variable: str | None
    value: str | None
    """What the worker's ``variable`` is set to (None: pinned with ``set_device``)."""

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "indices": list(self.indices), "variable": self.variable,
                "value": self.value}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WorkerSlice:
        return cls(str(data["type"]), tuple(int(i) for i in data["indices"]),
                   data.get("variable"), data.get("value"))


def plan_types(registry: CapabilityRegistry, variables: Mapping[str, str | None],
               environ: Mapping[str, str]) -> list[TypePlan]:
    """One plan per accelerator type present; raises :class:`ConfigError` where a type cannot
    be split (a user-set variable whose entries do not match the devices torch sees)."""
    plans = []
    for kind in registry.device_types():
        if kind == "cpu":
            continue
        count = max(identity.count for identity in registry.devices if identity.type == kind)
        variable = variables.get(kind)
        if count < 1:
            continue
        if variable is None:
            plans.append(TypePlan(kind, count, None, ()))
            continue
        user = environ.get(variable)
        if user is None or not user.strip():
            plans.append(TypePlan(kind, count, variable, tuple(str(i) for i in range(count))))
            continue
        entries = tuple(part.strip() for part in user.split(","))
        if len(entries) != count or len(set(entries)) != count or "" in entries:
            raise ConfigError(f"--devcaps-pin-workers: {variable}={user!r} names {len(entries)} "
                              f"entries but {count} {kind} device(s) are visible, so it cannot "
                              f"be split between workers (set one index or UUID per device, or "
                              f"unset it)", file=f"{variable} environment variable")
        plans.append(TypePlan(kind, count, variable, entries, user_set=True))
    return plans


def slice_indices(count: int, workers: int, worker: int) -> tuple[int, ...]:
    """Worker ``worker`` of ``workers``: a contiguous, disjoint share of ``count`` devices while
    ``workers <= count`` (sizes differ by at most one), else the one device ``worker mod count``."""
    if workers <= count:
        return tuple(range(worker * count // workers, (worker + 1) * count // workers))
    return (worker % count,)


def worker_slices(plans: list[TypePlan], workers: int, worker: int) -> list[WorkerSlice]:
    slices = []
    for plan in plans:
        indices = slice_indices(plan.count, workers, worker)
        value = None if plan.variable is None else ",".join(plan.entries[i] for i in indices)
        slices.append(WorkerSlice(plan.type, indices, plan.variable, value))
    return slices


def describe(plans: list[TypePlan], workers: int) -> list[str]:
    """The lines the controller prints: who gets what, and where devices are shared."""
    lines = []
    for plan in plans:
        shares = [worker_slices([plan], workers, w)[0] for w in range(workers)]
        how = (f"{plan.variable}" + (" (within the value you set)" if plan.user_set else "")
               if plan.variable else "set_device (the backend has no visible-devices variable)")
        given = "; ".join(f"gw{w}={s.value if s.value is not None else s.indices[0]}"
                          for w, s in enumerate(shares))
        lines.append(f"devcaps: {plan.type} split between {workers} workers by {how}: {given}")
        if workers > plan.count:
            lines.append(f"devcaps: {workers} workers share {plan.count} {plan.type} device(s): "
                         f"a distributed world in one worker may use a device another worker uses")
    return lines


def restricted(registry: CapabilityRegistry, slices: list[WorkerSlice]) -> CapabilityRegistry:
    """The registry as a worker with these slices sees it: each sliced type's devices renumbered
    from 0 (what the visible-devices variable does), its count the slice's size."""
    by_type = {s.type: s for s in slices if s.variable is not None}
    devices: list[DeviceIdentity] = []
    records: dict[str, dict[str, CapabilityRecord]] = {}
    for identity in registry.devices:
        chosen = by_type.get(identity.type)
        if chosen is None:
            devices.append(identity)
            records[identity.key] = {r.capability: r for r in registry.records(identity.key)}
            continue
        if any(d.type == identity.type for d in devices):
            continue  # the type's slice was added with its first identity
        for new_index, old_index in enumerate(chosen.indices):
            source = registry.identity(f"{identity.type}:{old_index}")
            renamed = dataclasses.replace(source, index=new_index, count=len(chosen.indices))
            devices.append(renamed)
            records[renamed.key] = {r.capability: dataclasses.replace(r, device=renamed.key)
                                    for r in registry.records(source.key)}
    meta = dict(registry.meta, partition=[s.to_dict() for s in slices])
    return CapabilityRegistry(devices, records, registry.catalogue, meta, registry.facts)
