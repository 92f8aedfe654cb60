"""Splitting accelerators between xdist workers: slices, user values, the worker's registry.

The accelerator is a made-up type "acme" with its own visible-devices variable: partitioning is generic.
"""

from __future__ import annotations

import pytest

from pytest_devcaps.config import load_catalogue
from pytest_devcaps.errors import ConfigError
from pytest_devcaps.model import CapabilityRecord, DeviceIdentity, Level
from pytest_devcaps.parallel.partition import plan_types, restricted, slice_indices, worker_slices
from pytest_devcaps.registry import CapabilityRegistry


def _registry(count: int) -> CapabilityRegistry:
    catalogue = load_catalogue()
    devices = [DeviceIdentity(type="cpu", index=None, vendor="cpu", name="host", arch="x86"),
               *(DeviceIdentity(type="acme", index=i, vendor="acme", name=f"gpu{i}",
                                arch="sm_90", count=count, facts={"uuid": f"GPU-{i}"})
                 for i in range(count))]
    records = {d.key: {name: CapabilityRecord(name, d.key, Level.NATIVE, f"{d.name} has it", "test")
                       for name in catalogue.names()} for d in devices}
    return CapabilityRegistry(devices, records, catalogue)


@pytest.mark.parametrize(("count", "workers", "expected"), [
    (8, 2, [(0, 1, 2, 3), (4, 5, 6, 7)]),
    (8, 3, [(0, 1), (2, 3, 4), (5, 6, 7)]),
    (2, 2, [(0,), (1,)]),
    (2, 3, [(0,), (1,), (0,)]),  # more workers than devices: shared, one each
])
def test_slices_are_disjoint_while_devices_last(count: int, workers: int,
                                                expected: list[tuple[int, ...]]) -> None:
    assert [slice_indices(count, workers, w) for w in range(workers)] == expected


def test_slices_of_a_user_value_keep_its_entries() -> None:
    plans = plan_types(_registry(4), {"acme": "ACME_VISIBLE_DEVICES"},
                       {"ACME_VISIBLE_DEVICES": "GPU-a, GPU-b,GPU-c,GPU-d"})
    assert plans[0].user_set
    values = [worker_slices(plans, 2, w)[0].value for w in range(2)]
    assert values == ["GPU-a,GPU-b", "GPU-c,GPU-d"]


@pytest.mark.parametrize("value", ["0,1,2", "0,1,1,2", "0,,1,2"])
def test_a_user_value_that_does_not_name_each_device_once_is_refused(value: str) -> None:
    with pytest.raises(ConfigError, match="ACME_VISIBLE_DEVICES=.*cannot be split between workers"):
        plan_types(_registry(4), {"acme": "ACME_VISIBLE_DEVICES"}, {"ACME_VISIBLE_DEVICES": value})


def test_worker_registry_is_renumbered_from_zero() -> None:
    registry = _registry(4)
    plans = plan_types(registry, {"acme": "ACME_VISIBLE_DEVICES"}, {})
    worker = restricted(registry, worker_slices(plans, 2, 1))
    accelerators = [d for d in worker.devices if d.type == "acme"]
    assert [(d.key, d.name, d.count, d.facts["uuid"]) for d in accelerators] == \
        [("acme:0", "gpu2", 2, "GPU-2"), ("acme:1", "gpu3", 2, "GPU-3")]
    assert worker.record("dtype.bf16", "acme:1").reason == "gpu3 has it"
    assert worker.identity("cpu").key == "cpu"
    assert worker.meta["partition"][0]["value"] == "2,3"


def test_types_without_a_variable_are_pinned_not_masked() -> None:
    registry = _registry(2)
    plans = plan_types(registry, {"acme": None}, {})
    piece = worker_slices(plans, 2, 1)[0]
    assert (piece.variable, piece.value, piece.indices) == (None, None, (1,))
    assert restricted(registry, [piece]).identity("acme:1").count == 2  # not renumbered
