"""Issue 19: a declared class runs only on its hardware, every skip is counted once in the
footer, and the JSON report carries each test's reason as the terminal shows it."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

CLASSES = """
import pytest

@pytest.mark.hardware("accelerator")
def test_accelerator():
    pass

@pytest.mark.hardware("accelerator")
def test_accelerator_device(device):
    pass

@pytest.mark.hardware("nvidia")
def test_vendor():
    pass

@pytest.mark.hardware("cpu")
def test_cpu_type(device):
    pass

@pytest.mark.hardware("generic")
def test_generic(device):
    pass
"""


def test_an_accelerator_class_is_skipped_on_the_cpu(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_classes=CLASSES)
    result = pytester.runpytest("--devcaps-devices=cpu", "-rs")
    result.assert_outcomes(passed=2, skipped=3)
    result.stdout.fnmatch_lines_random([
        "SKIPPED [[]1] test_classes.py:*: hardware class accelerator needs an accelerator; this "
        "test's device is cpu",
        "SKIPPED [[]1] test_classes.py:*: hardware class accelerator needs an accelerator; this "
        "test's device is cpu",
        "SKIPPED [[]1] test_classes.py:*: hardware class nvidia runs only on nvidia; this test's "
        "device is cpu"])


@pytest.mark.parametrize("how", ["option", "env", "ini"])
def test_pytorch_reading_only_labels(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                     how: str) -> None:
    pytester.makepyfile(test_classes=CLASSES)
    args = ["--devcaps-devices=cpu"]
    if how == "option":
        args.append("--devcaps-hardware-reading=PyTorch")
    elif how == "env":
        monkeypatch.setenv("PYTEST_DEVCAPS_HARDWARE_READING", "pytorch")
    else:
        pytester.makeini("[pytest]\ndevcaps_hardware_reading = pytorch\n")
    result = pytester.runpytest(*args)
    result.assert_outcomes(passed=5)


def test_a_misspelled_reading_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_classes=CLASSES)
    result = pytester.runpytest("--devcaps-hardware-reading=pytroch")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--devcaps-hardware-reading: unknown hardware reading 'pytroch' "
                                 "(did you mean 'pytorch'?)*"])


def test_the_bridge_skips_an_accelerator_class_on_the_cpu(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bridge="""
        from pytest_devcaps import DevcapsTestCase, hardware

        @hardware("accelerator")
        class TestOnAccelerators(DevcapsTestCase):
            def test_a(self):
                pass
        """)
    result = pytester.run(sys.executable, "-m", "unittest", "-v", "test_bridge")
    assert 'skipped "hardware class accelerator needs an accelerator' in result.stderr.str()
    assert "OK (skipped=1)" in result.stderr.str()


FOOTER = """
import unittest
import pytest
from pytest_devcaps import requires_capability

@pytest.mark.requires_capability("attention.flash", "runtime.graphs")
def test_two_missing(device):
    pass

@pytest.mark.requires_capability("attention.flash")
def test_one_missing(device):
    pass

def test_own_skip():
    pytest.skip("my own reason")

@unittest.skip("not today")
class TestSkippedClass(unittest.TestCase):
    def test_a(self):
        pass
    def test_b(self):
        pass

@requires_capability("runtime.graphs")
class TestDecoratedClass(unittest.TestCase):
    def test_c(self):
        pass
    def test_d(self):
        pass

def test_passes():
    pass
"""


def test_footer_counts_each_skipped_test_once(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_footer=FOOTER)
    result = pytester.runpytest("--devcaps-devices=cpu", "--devcaps-set=attention.flash=unsupported",
                                "--devcaps-set=runtime.graphs=unsupported")
    result.assert_outcomes(passed=1, skipped=7)
    result.stdout.fnmatch_lines(["*devcaps: skipped tests by reason*",
                                 "7 test(s) skipped: 4 for missing capabilities, 3 for other reasons"])
    result.stdout.fnmatch_lines_random([
        "    2  not today",
        "    2  runtime.graphs on cpu: unsupported (cli)",
        "    1  attention.flash on cpu: unsupported (cli)",
        "    1  attention.flash on cpu: unsupported (cli); runtime.graphs on cpu: unsupported (cli)"
        "  [[]the test misses 2 things]",
        "    1  my own reason",
    ])
    section = result.stdout.str().split("skipped tests by reason", 1)[1].split("test(s) skipped", 1)[0]
    assert sum(int(n) for n in re.findall(r"^\s+(\d+)  ", section, re.M)) == 7


REASONS = """
import pytest

def test_pass():
    pass

def test_fail():
    assert 1 == 2, "one is not two"

def test_own_skip():
    pytest.skip("my own reason")

@pytest.mark.xfail(reason="known bug")
def test_xfail():
    raise ValueError("boom")

@pytest.mark.xfail_on("vendor == 'cpu'", reason="cpu numerics")
def test_xfail_on(device):
    raise AssertionError("off")

@pytest.mark.requires_capability("runtime.graphs")
def test_capability(device):
    pass

def test_error(missing_fixture):
    pass
"""


KINDS = {"SKIPPED": "skipped", "XFAIL": "xfailed", "FAILED": "failed"}


def _summary(lines: list[str]) -> list[tuple[str, str]]:
    """(outcome, reason) of every -rA short-summary line (the terminal's own text)."""
    found = []
    for line in lines:
        m = re.match(r"^(SKIPPED) \[\d+\] \S+?:\d+: (.*)$", line) or \
            re.match(r"^(XFAIL|FAILED) \S+ - (.*)$", line)
        if m:
            found.append((KINDS[m.group(1)], m.group(2)))
    return sorted(found)


@pytest.mark.parametrize("xdist", [False, True], ids=["serial", "xdist"])
def test_json_reasons_match_the_terminal(pytester: pytest.Pytester, tmp_path: Path, xdist: bool) -> None:
    pytester.makepyfile(test_reasons=REASONS)
    report = tmp_path / "reasons.json"
    args = ["--devcaps-devices=cpu", "--devcaps-set=runtime.graphs=unsupported", "-rA", "-vv",
            f"--devcaps-json={report}", *(["-n", "2"] if xdist else [])]
    result = pytester.runpytest_subprocess(*args)
    result.assert_outcomes(passed=1, failed=1, skipped=2, xfailed=2, errors=1)
    tests = {t["nodeid"].split("::")[-1]: t for t in json.loads(report.read_text())["tests"]}
    assert tests["test_fail"]["reason"] == "AssertionError: one is not two"
    assert tests["test_own_skip"]["reason"] == "my own reason"
    assert tests["test_xfail"]["reason"] == "known bug"
    assert tests["test_xfail_on[cpu]"]["reason"].endswith("cpu numerics")
    assert tests["test_capability[cpu]"]["reason"].startswith("requires runtime.graphs on cpu")
    assert tests["test_error"]["outcome"] == "error" and "missing_fixture" in tests["test_error"]["reason"]
    assert "reason" not in tests["test_pass"]
    ours = sorted((t["outcome"], t["reason"]) for t in tests.values() if t["outcome"] in KINDS.values())
    assert ours == _summary(result.stdout.lines)


def test_devcaps_testcase_runs_under_pytorchs_run_tests(pytester: pytest.Pytester,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # With CI set, run_tests writes XML reports through xmlrunner (common_utils IS_CI), a
    # package PyTorch's own CI installs and ours need not: the question here is run_tests itself.
    monkeypatch.delenv("CI", raising=False)
    pytester.makepyfile(test_rt="""
        from torch.testing._internal.common_utils import TestCase, run_tests
        from pytest_devcaps import DevcapsTestCase, requires_capability

        class TestMine(DevcapsTestCase):
            def test_is_both(self):
                self.assertIsInstance(self, TestCase)
                self.assertIsInstance(self, DevcapsTestCase)

            @requires_capability("runtime.graphs")
            def test_gated(self):
                pass

        if __name__ == "__main__":
            run_tests()
        """)
    result = pytester.run(sys.executable, "test_rt.py", "-v")
    text = result.stdout.str() + result.stderr.str()
    assert result.ret == 0, text
    assert "should extend from" not in text
    assert re.search(r"OK \(skipped=1\)|Ran 2 tests", text), text


def test_lint_says_what_it_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_devcaps.commands.main import main

    (tmp_path / "test_a.py").write_text("def test_a(device):\n    pass\n")
    (tmp_path / "test_b.py").write_text("def test_b():\n    pass\n")
    assert main(["lint", str(tmp_path)]) == 0
    assert capsys.readouterr().out == "devcaps lint: 2 files checked, no hardcoded device checks\n"
