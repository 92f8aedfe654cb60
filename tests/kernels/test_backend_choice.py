"""How ``backend="auto"`` picks, with the registry answer stubbed."""

from __future__ import annotations

import pytest
import torch

import pytest_devcaps.registry as registry
from devcaps_kernels import choose_backend


@pytest.mark.parametrize(("device", "has_triton", "expected"), [
    ("cpu", False, "cpu"),
    ("meta", False, "reference"),
    ("meta", True, "triton"),
    ("cpu", True, "triton"),
])
def test_choose_backend(monkeypatch, device, has_triton, expected):
    asked = []

    def device_has(dev, capability, *, native=False):
        asked.append((str(dev), capability, native))
        return has_triton and capability == "compile.triton"

    monkeypatch.setattr(registry, "device_has", device_has)
    assert choose_backend(torch.device(device)) == expected
    assert asked[0] == (device, "compile.triton", False)
