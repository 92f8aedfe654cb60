"""Our device/dtype fixtures step aside for a project's own; devices; dtypes per device type.

Two device types: the CPU and a fake PrivateUse1 backend (`acme`, two devices) registered in a
conftest; renaming PrivateUse1 is once per process, so the run is a subprocess.
"""

from __future__ import annotations

from pathlib import Path

import pytest

FAKE_BACKEND = (Path(__file__).parent / "_fake_acme.py").read_text()

OURS = """
import pytest
import torch

@pytest.mark.dtypes(torch.float32, when={"acme": (torch.float16, torch.bfloat16)})
def test_dtypes_per_device(device, dtype):
    pass

@pytest.mark.requires_devices(2)
def test_devices(devices, device):
    assert [str(d) for d in devices] == ["acme:0", "acme:1"]
"""

OWN_IN_MODULE = """
import pytest
import torch

@pytest.fixture
def device():
    return torch.device("cpu")

def test_project_device(device):
    assert device == torch.device("cpu")

def test_ours_still_reachable(devcaps_device, device):
    assert device == torch.device("cpu")
    assert devcaps_device.type in ("cpu", "acme")
"""

OWN_IN_CONFTEST = """
import pytest
import torch

@pytest.fixture
def device():
    return torch.device("cpu")

@pytest.fixture
def dtype():
    return torch.float64
"""

OWN_IN_SUBDIR = """
import torch

def test_project_device_and_dtype(device, dtype, devcaps):
    assert (device, dtype) == (torch.device("cpu"), torch.float64)
"""

OWN_DTYPE = """
import pytest
import torch

@pytest.mark.dtypes(torch.float16)
def test_dtypes_on_the_project_dtype(dtype):
    pass
"""


def test_fixtures_step_aside_and_follow_the_device(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(fake_acme=FAKE_BACKEND, test_ours=OURS, test_own_in_module=OWN_IN_MODULE)
    pytester.makeconftest("import fake_acme  # noqa: F401")
    sub = pytester.mkpydir("sub")
    (sub / "conftest.py").write_text(OWN_IN_CONFTEST)
    (sub / "test_own_device.py").write_text(OWN_IN_SUBDIR)
    (sub / "test_own_dtype.py").write_text(OWN_DTYPE)
    result = pytester.runpytest_subprocess("-v", "-rs", "--continue-on-collection-errors",
                                           "--devcaps-set=dtype.fp16=native@acme",
                                           "--devcaps-set=dtype.bf16=native@acme")
    result.stdout.fnmatch_lines_random([
        "*test_ours.py::test_dtypes_per_device[[]cpu-float32[]] PASSED*",
        "*test_ours.py::test_dtypes_per_device[[]acme-float16[]] PASSED*",
        "*test_ours.py::test_dtypes_per_device[[]acme-bfloat16[]] PASSED*",
        "*test_ours.py::test_devices[[]acme[]] PASSED*",
        "*test_ours.py::test_devices[[]cpu[]] SKIPPED*",
        # the project's own device: no ids, one run; devcaps_device still per device
        "*test_own_in_module.py::test_project_device PASSED*",
        "*test_own_in_module.py::test_ours_still_reachable[[]cpu[]] PASSED*",
        "*test_own_in_module.py::test_ours_still_reachable[[]acme[]] PASSED*",
        "*sub/test_own_device.py::test_project_device_and_dtype PASSED*",
        "*sub/test_own_dtype.py::test_dtypes_on_the_project_dtype ERROR*",
        "*dtypes: parametrizes devcaps' dtype fixture, but this test's `dtype` is the project's own "
        "(defined in *conftest.py); request `devcaps_dtype` instead",
    ])
    # A bad mark errors its own test only (at setup, as pytest's skipif would).
    result.assert_outcomes(passed=8, skipped=1, errors=1)
