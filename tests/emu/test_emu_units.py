"""What needs no compiler: the emu plugin's answers and capability, PyTorch's PrivateUse1 gates
and capability slot, the harness's placement of ranks on private devices."""

from __future__ import annotations

import ast
import subprocess
import sys
import types
from typing import Any

import pytest

from pytest_devcaps.backends.base import PRIVATE_DEVICES
from pytest_devcaps.emu import NAME
from pytest_devcaps.emu.adapter import EmuAdapter
from pytest_devcaps.emu.vendor_hooks import (
    pytest_devcaps_adjust_results,
    pytest_devcaps_register_capabilities,
)
from pytest_devcaps.marks.pytorch_gates import GATES, decorator_gate, installed_torch
from pytest_devcaps.model import PROBE_SOURCE, CapabilityRecord, DeviceIdentity, Level
from pytest_devcaps.pytorch_compat import fill_privateuse1_capabilities
from pytest_devcaps.registry.registrars import CapabilityRegistrar


def _identity(kind: str = NAME) -> DeviceIdentity:
    return DeviceIdentity(type=kind, index=0, vendor=kind, name=kind, arch=kind)


def _record(capability: str, level: Level = Level.NATIVE, source: str = PROBE_SOURCE
            ) -> CapabilityRecord:
    return CapabilityRecord(capability, f"{NAME}:0", level, "the probe ran", source)


def test_emuccl_is_a_capability_with_its_probe() -> None:
    registrar = CapabilityRegistrar()
    pytest_devcaps_register_capabilities(registrar)
    assert [spec.name for spec in registrar.specs] == ["dist.emuccl"]
    spec = registrar.probes["dist.emuccl"]
    assert spec.isolated and spec.target == "pytest_devcaps.emu.emuccl:probe_emuccl"


@pytest.mark.parametrize(("capability", "emulated", "why"), [
    ("dist.emuccl", True, "gloo over host memory"),
    ("runtime.streams", True, "no two run concurrently"),
    ("dtype.bf16", True, "host CPU's kernels"),
    ("runtime.events", False, None),
    ("runtime.memory_stats", False, None),
    ("dist.gloo", False, None),
])
def test_probe_answers_the_emu_plugin_calls_emulated(capability: str, emulated: bool,
                                                     why: str | None) -> None:
    replaced = pytest_devcaps_adjust_results(_identity(), [_record(capability)]) or []
    assert bool(replaced) is emulated
    if replaced:
        (record,) = replaced
        assert (record.level, record.source) == (Level.EMULATED, "hook:devcaps-emu")
        assert record.reason.startswith("the probe ran; ") and why in record.reason


def test_the_emu_plugin_leaves_other_answers_and_devices_alone() -> None:
    chosen = _record("runtime.streams", source="cli")
    assert pytest_devcaps_adjust_results(_identity(), [chosen]) == []
    assert pytest_devcaps_adjust_results(_identity("cpu"), [_record("runtime.streams")]) is None


def test_emu_declares_private_devices() -> None:
    assert PRIVATE_DEVICES in EmuAdapter.facts


def test_private_devices_let_a_world_have_more_ranks_than_devices(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from pytest_devcaps.distributed.fixture import make_runner
    from pytest_devcaps.distributed.settings import ENV_DIST_SHARE_DEVICES

    monkeypatch.delenv(ENV_DIST_SHARE_DEVICES, raising=False)
    request: Any = types.SimpleNamespace(node=types.SimpleNamespace(
        config=types.SimpleNamespace(pluginmanager=types.SimpleNamespace(hasplugin=lambda _: False))))
    for facts, shared in (({PRIVATE_DEVICES: True}, True), ({}, False),
                          ({PRIVATE_DEVICES: "yes"}, False)):
        devcaps: Any = types.SimpleNamespace(identity=types.SimpleNamespace(count=2, facts=facts))
        runner = make_runner(torch.device("cpu"), "gloo", devcaps, request)
        assert runner.share_devices is shared, facts


def _gate(source: str) -> Any:
    decorator = ast.parse(f"@{source}\ndef f(): pass").body[0].decorator_list[0]  # type: ignore[attr-defined]
    gate = decorator_gate(decorator)
    return None if gate is None else (gate.name, gate.hardware, gate.source)


def test_pytorch_gates_on_the_privateuse1_backend() -> None:
    cuda, pu1 = (GATES[name].source(installed_torch()) for name in ("TEST_CUDA", "TEST_PRIVATEUSE1"))
    assert _gate('unittest.skipIf(not TEST_PRIVATEUSE1, "x")') == (
        "TEST_PRIVATEUSE1", "privateuse1", pu1)
    # either one will do: the test runs on CUDA or on the PrivateUse1 backend
    assert _gate('unittest.skipIf(not (TEST_CUDA or TEST_PRIVATEUSE1), "x")') == (
        "TEST_CUDA(or TEST_PRIVATEUSE1)", "accelerator", cuda)
    assert _gate('unittest.skipUnless(TEST_CUDA or TEST_PRIVATEUSE1, "x")')[1] == "accelerator"
    # an alternative that needs no device: no device gate
    assert _gate('unittest.skipIf(not (TEST_CUDA or IS_LINUX), "x")') is None
    # both are needed: the stricter
    assert _gate('unittest.skipIf(not (TEST_CUDA and TEST_CUDNN), "x")')[1] == "cuda"
    assert _gate('unittest.skipIf(not TEST_CUDA or not TEST_MULTIGPU, "x")')[0] == "TEST_CUDA"


class _DeviceTypeTestBase:
    device_type = "generic_device_type"

    @classmethod
    def _capabilities(cls) -> dict[str, Any]:
        return {}  # undeclared: PyTorch's skips raise AssertionError for what is asked


def _common_device_type(base: type, with_skips: bool = True) -> Any:
    module = types.SimpleNamespace(PrivateUse1TestBase=base)
    if with_skips:
        module.requires_capabilities = lambda *names: None
    return module


def test_privateuse1_capability_slot_is_filled_from_the_registry(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import pytest_devcaps.pytorch_compat as compat

    asked: list[str] = []
    monkeypatch.setattr(compat, "capabilities_mapping",
                        lambda kind, registry=None: asked.append(kind) or {"dtype": {"bf16": bool}})
    base = type("PrivateUse1TestBase", (_DeviceTypeTestBase,), {"device_type": "privateuse1"})
    assert fill_privateuse1_capabilities(_common_device_type(base)) is True
    assert base._capabilities() == {"dtype": {"bf16": bool}}  # type: ignore[attr-defined]
    assert fill_privateuse1_capabilities(_common_device_type(base)) is False  # once
    assert asked == [compat.class_device_type(base)]  # the renamed backend's name


def test_privateuse1_capability_slot_left_alone_where_declared_or_absent() -> None:
    declared = type("PrivateUse1TestBase", (_DeviceTypeTestBase,),
                    {"_capabilities": classmethod(lambda cls: {"dtype": {"bf16": lambda: True}})})
    assert fill_privateuse1_capabilities(_common_device_type(declared)) is False
    plain = type("PrivateUse1TestBase", (_DeviceTypeTestBase,), {})
    assert fill_privateuse1_capabilities(_common_device_type(plain, with_skips=False)) is False
    assert fill_privateuse1_capabilities(types.SimpleNamespace()) is False
    assert "_devcaps_capabilities" not in vars(plain)


def test_emuccl_probe_without_the_backend_says_why() -> None:
    # a fresh interpreter without PYTEST_DEVCAPS_EMU_DEVICES: nothing registered emuccl
    script = ("from pytest_devcaps.emu.emuccl import probe_emuccl; o = probe_emuccl('cpu'); "
              "print(o.level.value, '|', o.reason)")
    env = {k: v for k, v in __import__("os").environ.items() if k != "PYTEST_DEVCAPS_EMU_DEVICES"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=300, check=True)
    level, reason = done.stdout.strip().split(" | ", 1)
    assert level == "unsupported" and "PYTEST_DEVCAPS_EMU_DEVICES is unset" in reason
