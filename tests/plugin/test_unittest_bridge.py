"""Decorators and the TestCase mixin: the same skips under `python -m unittest` as under pytest."""

from __future__ import annotations

import ast
import re
import sys

import pytest

SUITE = """
import unittest

import pytest
import torch

from pytest_devcaps import (DevcapsTestCase, requires_capability, requires_devices, skip_on,
                            tolerance, xfail_on)


class TestGated(DevcapsTestCase):
    @requires_capability("dist.nccl")
    def test_nccl(self):
        pass

    @requires_devices(3)
    def test_three_devices(self):
        pass

    @pytest.mark.requires_capability("runtime.graphs")   # a plain mark: the mixin honours it
    def test_raw_mark(self):
        pass

    @skip_on("vendor == 'cpu' and arch != 'none'", reason="known broken on CPUs")
    def test_skip_on(self):
        pass

    @xfail_on("type == 'cpu'", reason="fails on CPUs")
    def test_xfail(self):
        raise AssertionError("boom")

    @xfail_on("type == 'cpu'", reason="a KeyError on CPUs", raises=KeyError)
    def test_xfail_other_error(self):
        raise ValueError("not the expected error")

    @tolerance(dtype=torch.float16, atol=0.5, rtol=0.0, when="type == 'cpu'")
    @tolerance(dtype=torch.float16, atol=9.0, rtol=9.0, when="type == 'cuda'")
    def test_devcaps_and_tolerances(self):
        assert self.devcaps.device == "cpu" == str(self.devcaps_device)
        assert self.devcaps.has("dtype.fp64")
        assert (self.tolerances.atol, self.tolerances.rtol) == (None, None)
        assert self.tolerances.for_dtype(torch.float16).kwargs() == {"atol": 0.5, "rtol": 0.0}
        self.tolerances.assert_close(torch.tensor([1.0], dtype=torch.float16),
                                     torch.tensor([1.4], dtype=torch.float16))


@requires_capability("runtime.graphs")
class TestClassGated(unittest.TestCase):
    def setUp(self):
        raise AssertionError("a class-level skip comes before setUp")

    def test_graphs(self):
        pass


class TestPlain(unittest.TestCase):
    @requires_capability("runtime.graphs")
    def test_method_only(self):
        pass

    @xfail_on("type == 'cpu'", reason="fails on CPUs")
    def test_unguarded_xfail(self):
        raise AssertionError("boom")
"""


def _unittest_reasons(output: str) -> dict[str, str]:
    reasons = {}
    for match in re.finditer(r"^(test_\w+) \(.*?\) \.\.\. skipped (.+)$", output, re.M):
        reasons[match.group(1)] = ast.literal_eval(match.group(2))
    return reasons


def _pytest_reasons(lines: list[str]) -> list[str]:
    return [line.split(": ", 1)[1] for line in lines if line.startswith("SKIPPED [1]")]


def test_unittest_and_pytest_skip_with_the_same_reasons(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_gated=SUITE)
    # The unittest path reads the registry the library builds (default options, no --devcaps-set):
    # the catalogue's rules say nccl and device graphs are unsupported on every CPU.
    plain = pytester.run(sys.executable, "-m", "unittest", "-v", "test_gated", timeout=300)
    output = plain.stderr.str()
    assert plain.ret == 1, output  # test_xfail_other_error fails, as under pytest
    # unittest decides on expected failures before the method runs: only a guarded class can.
    assert "xfail_on needs the TestCase class to use DevcapsMixin" in output
    assert "test_xfail (test_gated.TestGated.test_xfail) ... expected failure" in output
    assert re.search(r"test_xfail_other_error .* \.\.\. ERROR", output), output
    assert "test_devcaps_and_tolerances (test_gated.TestGated.test_devcaps_and_tolerances) ... ok" in output
    reasons = _unittest_reasons(output)
    assert set(reasons) == {"test_nccl", "test_three_devices", "test_skip_on", "test_graphs",
                            "test_method_only", "test_raw_mark"}
    assert reasons["test_nccl"].startswith("requires dist.nccl on cpu: unsupported (")
    assert reasons["test_three_devices"] == "requires 3 cpu devices; found 1"
    assert reasons["test_skip_on"] == ("skip_on(vendor == 'cpu' and arch != 'none') holds on cpu "
                                       f"(arch={_cpu_arch(output)}, vendor=cpu): known broken on CPUs")

    # A subprocess: assert_close imports torch.distributed.tensor, which registers torch
    # libraries that an in-process run's module cleanup would make a later import register twice.
    under_pytest = pytester.runpytest_subprocess("-rsx", "test_gated.py")
    under_pytest.assert_outcomes(passed=1, skipped=6, xfailed=2, failed=1)
    assert sorted(_pytest_reasons(under_pytest.outlines)) == sorted(reasons.values())


def _cpu_arch(output: str) -> str:
    found = re.search(r"arch=(\w+), vendor=cpu", output)
    assert found, output
    return found.group(1)


def test_a_decorator_typo_fails_at_decoration() -> None:
    from pytest_devcaps import requires_memory, tolerance
    from pytest_devcaps.errors import MarkerError

    with pytest.raises(MarkerError, match=r"unexpected keyword argument 'fre' \(did you mean 'free'\?\)"):
        requires_memory("1GB", fre=True)
    with pytest.raises(MarkerError, match=r"unexpected keyword argument 'atl' \(did you mean 'atol'\?\)"):
        tolerance(atl=0.1, rtol=0.1)


def test_unknown_capability_on_a_testcase_errors_under_both_runners(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bad="""
        import unittest
        import pytest
        from pytest_devcaps import DevcapsTestCase

        class TestBad(DevcapsTestCase):
            @pytest.mark.requires_capability("dtype.bf61")
            def test_typo(self):
                pass
    """)
    plain = pytester.run(sys.executable, "-m", "unittest", "test_bad", timeout=300)
    assert "unknown capability 'dtype.bf61' (did you mean 'dtype.bf16'?)" in plain.stderr.str()
    assert plain.ret == 1
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*requires_capability: argument 1: unknown capability 'dtype.bf61' "
                                 "(did you mean 'dtype.bf16'?)*"])


def test_hardware_selection_under_unittest(pytester: pytest.Pytester,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_classes="""
        from pytest_devcaps import DevcapsTestCase, hardware, requires_capability

        class TestClasses(DevcapsTestCase):
            def test_generic(self):
                pass

            @hardware("accelerator")
            def test_declared(self):
                pass
    """)
    monkeypatch.setenv("PYTEST_DEVCAPS_HARDWARE", "accelerator")
    # PyTorch's reading: the class selects; devcaps' own reading would also skip it on the CPU
    # (tests/plugin/test_honest_outcomes.py)
    monkeypatch.setenv("PYTEST_DEVCAPS_HARDWARE_READING", "pytorch")
    plain = pytester.run(sys.executable, "-m", "unittest", "-v", "test_classes", timeout=300)
    output = plain.stderr.str()
    assert "test_declared (test_classes.TestClasses.test_declared) ... ok" in output
    assert ("test_generic (test_classes.TestClasses.test_generic) ... skipped 'hardware class "
            "generic (inferred) not selected (PYTEST_DEVCAPS_HARDWARE=accelerator)'") in output
    monkeypatch.setenv("PYTEST_DEVCAPS_HARDWARE", "acclerator")
    plain = pytester.run(sys.executable, "-m", "unittest", "test_classes", timeout=300)
    assert "unknown hardware class 'acclerator' (did you mean 'accelerator'?)" in plain.stderr.str()


ENV_SUITE = """
import unittest

import pytest

from pytest_devcaps import DevcapsTestCase, requires_capability


class TestEnv(DevcapsTestCase):
    def test_plain(self):
        pass

    @requires_capability("dtype.fp64")
    def test_fp64(self):
        pass


class TestEnvCPU(DevcapsTestCase):
    device_type = "cpu"

    def test_on_cpu(self):
        pass
"""

_OVERRIDE = """devcaps: 1
overrides:
  - match: {type: cpu}
    set:
      dtype.fp64: {level: unsupported, reason: "turned off by an override"}
"""


def _unittest(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
              **env: str) -> tuple[int, str]:
    for name in ("HARDWARE", "DEVICES", "EXCEPT", "REQUIRE", "PROFILE", "OVERRIDES",
                 "PROBE_TIMEOUT"):
        monkeypatch.delenv(f"PYTEST_DEVCAPS_{name}", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(f"PYTEST_DEVCAPS_{name}", value)
    result = pytester.run(sys.executable, "-m", "unittest", "-v", "test_env", timeout=300)
    return result.ret, result.stderr.str()


def test_an_empty_hardware_selection_is_an_error_under_both_runners(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hostile: ``,,`` used to skip every unittest test (run OK) and run every pytest test."""
    pytester.makepyfile(test_env=ENV_SUITE)
    code, output = _unittest(pytester, monkeypatch, HARDWARE=",,")
    message = "PYTEST_DEVCAPS_HARDWARE environment variable: ',,' names nothing"
    assert code == 1 and output.count(message) == 3, output
    assert "FAILED (errors=3)" in output
    result = pytester.runpytest("-p", "no:randomly")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: *{message}*"])
    monkeypatch.delenv("PYTEST_DEVCAPS_HARDWARE")
    result = pytester.runpytest("-p", "no:randomly", "--devcaps-hardware=, ,")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: *--devcaps-hardware: ', ,' names nothing*"])


@pytest.mark.parametrize(("env", "message"), [
    ({"PROBE_TIMEOUT": "nan"}, "PYTEST_DEVCAPS_PROBE_TIMEOUT environment variable: "),
    ({"DEVICES": ",cpu,"}, None),  # a trailing comma is fine
    ({"DEVICES": "xpuu"}, "unknown device type 'xpuu' (did you mean 'xpu'?)"),
    ({"EXCEPT": ","}, "PYTEST_DEVCAPS_EXCEPT environment variable: ',' names nothing"),
    ({"REQUIRE": "dtype.bf61"}, "unknown capability 'dtype.bf61' (did you mean 'dtype.bf16'?)"),
    ({"OVERRIDES": "missing.yaml"}, "override file 'missing.yaml' does not exist"),
    ({"PROFILE": "nvidia-h100"}, "planning against a device profile is pytest's"),
])
def test_every_variable_is_checked_under_unittest_as_under_pytest(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, env: dict[str, str],
        message: str | None) -> None:
    pytester.makepyfile(test_env=ENV_SUITE)
    code, output = _unittest(pytester, monkeypatch, **env)
    if message is None:
        assert code == 0 and "OK" in output, output
        return
    assert code == 1 and output.count(message) == 3 and "FAILED (errors=3)" in output, output


def test_the_variables_unittest_can_honour_are_honoured(pytester: pytest.Pytester,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_env=ENV_SUITE)
    pytester.path.joinpath("off.yaml").write_text(_OVERRIDE)
    code, output = _unittest(pytester, monkeypatch, OVERRIDES="off.yaml", EXCEPT="cpu")
    assert code == 0, output
    assert ("test_fp64 (test_env.TestEnv.test_fp64) ... skipped 'requires dtype.fp64 on cpu: "
            "unsupported (override:") in output
    assert ("test_on_cpu (test_env.TestEnvCPU.test_on_cpu) ... skipped 'device type cpu left "
            "out (PYTEST_DEVCAPS_EXCEPT=cpu)'") in output
    assert "test_plain (test_env.TestEnv.test_plain) ... ok" in output
    code, output = _unittest(pytester, monkeypatch, OVERRIDES="off.yaml",
                             REQUIRE="dtype.fp64")
    assert code == 1 and "FAILED (errors=1)" in output, output
    assert ("dtype.fp64 required on this runner (PYTEST_DEVCAPS_REQUIRE environment variable) "
            "but: requires dtype.fp64 on cpu: unsupported") in output
