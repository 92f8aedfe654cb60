"""PyTorch's instantiate_device_type_tests classes: marks evaluated against each class's device.

The second device type is a fake PrivateUse1 backend (`acme`, two devices, no kernels)
registered from a conftest before pytest-devcaps discovers devices and before
common_device_type lists its test bases; renaming PrivateUse1 is once per process, so every
run here is a subprocess.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("expecttest", reason="torch.testing._internal needs expecttest (the test extra)")

FAKE_BACKEND = (Path(__file__).parent / "_fake_acme.py").read_text()

SUITE = """
import fake_acme  # noqa: F401  (python -m unittest has no conftest)
import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase, run_tests

from pytest_devcaps import (DevcapsCapabilities, DevcapsMixin, requires_capability,
                            requires_devices)

LIB = torch.library.Library("devcaps_t", "FRAGMENT")
LIB.define("twice(Tensor x) -> Tensor")


class TestFoo(DevcapsCapabilities, DevcapsMixin, TestCase):
    hw_classification = "accelerator"

    @requires_devices(2)
    def test_two_devices(self, device):
        assert self.device_type == "acme"

    @requires_capability("attention.cudnn")
    def test_cudnn(self, device):
        assert self.device_type == "acme"

    def test_dispatch_key(self, device):
        key = self.devcaps.dispatch_key
        assert (key, self.devcaps.autograd_dispatch_key) == \\
            {"cpu": ("CPU", "AutogradCPU"), "acme": ("PrivateUse1", "AutogradPrivateUse1")}[self.device_type]
        LIB.impl("twice", lambda x: x * 2, key)
        assert torch._C._dispatch_has_kernel_for_dispatch_key("devcaps_t::twice", key)

    def test_capabilities_mapping(self, device):
        cudnn = type(self).get_capabilities("attention")["cudnn"]
        print(f"MAPPING {self.device_type} attention.cudnn={cudnn()}")


instantiate_device_type_tests(TestFoo, globals())

if __name__ == "__main__":
    run_tests()
"""


@pytest.fixture
def pytorch_suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(fake_acme=FAKE_BACKEND, test_foo=SUITE)
    pytester.makeconftest("import fake_acme  # noqa: F401")
    return pytester


def test_marks_follow_the_class_device_under_pytest(pytorch_suite: pytest.Pytester, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    result = pytorch_suite.runpytest_subprocess(
        "-rs", "-s", "--devcaps-set=attention.cudnn=native@acme",
        "--devcaps-set=attention.cudnn=unsupported@cpu", f"--devcaps-json={report}")
    # The main accelerator is acme: evaluated against it, the CPU class would pass both.
    result.assert_outcomes(passed=6, skipped=2)
    result.stdout.fnmatch_lines_random([
        "*test_foo.py:*: requires 2 cpu devices; found 1",
        "*test_foo.py:*: requires attention.cudnn on cpu: unsupported (cli: set on the command line)",
        "*MAPPING cpu attention.cudnn=False",
        "*MAPPING acme attention.cudnn=True",
        "devcaps: hardware classes: accelerator 8 (0 without a declared class)",
    ])
    data = json.loads(report.read_text())
    devices = {t["nodeid"].split("::")[-1]: t.get("device") for t in data["tests"] if t.get("device")}
    assert devices == {"test_two_devices_cpu": "cpu", "test_cudnn_cpu": "cpu",
                       "test_two_devices_acme": "acme:0", "test_cudnn_acme": "acme:0"}
    assert data["hardware"] == {"accelerator": 8}


def test_marks_follow_the_class_device_under_unittest(pytorch_suite: pytest.Pytester) -> None:
    result = pytorch_suite.run(sys.executable, "-m", "unittest", "-v", "test_foo", timeout=300)
    output = result.stderr.str()
    assert result.ret == 0, output
    assert "test_two_devices_cpu (test_foo.TestFooCPU.test_two_devices_cpu) ... skipped " \
           "'requires 2 cpu devices; found 1'" in output
    assert "test_two_devices_acme (test_foo.TestFooPRIVATEUSE1.test_two_devices_acme) ... ok" in output
    assert "test_dispatch_key_acme (test_foo.TestFooPRIVATEUSE1.test_dispatch_key_acme) ... ok" in output
    # unittest prints the reason with repr(): single or double quotes, depending on its text.
    assert re.search(r"test_cudnn_cpu \(.*\) \.\.\. skipped ['\"]requires attention\.cudnn on cpu: "
                     r"unsupported", output), output
