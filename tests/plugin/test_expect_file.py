"""--devcaps-expect: a backend's expectations file in a pytest session and under unittest.

One suite of our own: a known failure tied to an issue (footer and JSON carry the link), a strict
one that passes now (a failure), a skip by glob, a flaky test (pytest-rerunfailures reruns it), a
must-pass test that a skip mark would skip (an error), and a rule for a test that is gone (stale;
under strict mode the run fails).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SUITE = """
import pytest

def test_rounding():
    assert round(2.5) == 3          # Python rounds half to even: fails

def test_rounding_fixed():
    assert round(3.5) == 4

def test_huge_alloc():
    raise MemoryError("would allocate 80 GB")

def test_add():
    assert 1 + 1 == 2

@pytest.mark.skip(reason="skipped in the code")
def test_must():
    pass

ATTEMPTS = []

def test_timing():
    ATTEMPTS.append(1)
    assert len(ATTEMPTS) >= 2        # passes on its first rerun
"""

EXPECT = """\
expectations:
  - match: {device_type: cpu}
    xfail:
      - test: "test_ops.py::test_rounding"
        reason: "round-half-even differs"
        issue: "https://github.com/acme/backend/issues/12"
        strict: true
      - test: "test_ops.py::test_rounding_fixed"
        reason: "was off by one"
        issue: "https://github.com/acme/backend/issues/13"
        strict: true
    skip:
      - test: "test_ops.py::test_huge*"
        reason: "needs 80 GB"
      - test: "test_ops.py::test_gone"
        reason: "removed upstream"
    flaky:
      - test: "test_ops.py::test_timing"
        reruns: 2
    pass:
      - test: "test_ops.py::test_add"
      - test: "test_ops.py::test_must"
  - match: {device_type: cuda}
    skip:
      - test: "test_ops.py::test_add"
        reason: "not judged here: no cuda device in this session"
"""

ISSUE_12 = "https://github.com/acme/backend/issues/12"


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_ops=SUITE)
    pytester.path.joinpath("expect.yaml").write_text(EXPECT)
    return pytester


def test_every_rule_is_applied_and_reported(suite: pytest.Pytester, tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    result = suite.runpytest("--devcaps-expect=expect.yaml", f"--devcaps-json={report}", "-rs")
    assert result.parseoutcomes() == {"passed": 2, "failed": 1, "errors": 1, "skipped": 1,
                                      "xfailed": 1, "rerun": 1}
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "*ERROR at setup of test_must*",
        "must pass on cpu (expect.yaml:22), but it was skipped: skipped in the code",
        "*test_rounding_fixed*",
        "[[]XPASS(strict)[]] expected failure on cpu (expect.yaml:8): was off by one "
        "[[]issue: https://github.com/acme/backend/issues/13[]]",
        "*- devcaps: expectations (expect.yaml) -*",
        f"    1  xfailed  cpu: expect.yaml:4: round-half-even differs [[]issue: {ISSUE_12}[]]",
        "    1  XPASS(strict)  cpu: expect.yaml:8: was off by one*passes now: a failure of this run*",
        "    1  NOT PASSED  cpu: expect.yaml:22: test_ops.py::test_must  (a must-pass test did not pass)",
        "stale: expect.yaml:15: skip 'test_ops.py::test_gone' selects no collected test on cpu",
        "1 stale rule(s) in expect.yaml: an error under --devcaps-expect-strict",
        "*- devcaps: skipped tests by reason -*",
        "    1  expected skip on cpu (expect.yaml:13): needs 80 GB",
    ])
    data = json.loads(report.read_text())
    tests = {t["nodeid"].rpartition("::")[2]: t for t in data["tests"]}
    assert tests["test_rounding"]["outcome"] == "xfailed"
    assert tests["test_rounding"]["reason"] == (
        f"expected failure on cpu (expect.yaml:4): round-half-even differs [issue: {ISSUE_12}]")
    assert tests["test_rounding"]["expectation"] == {
        "outcome": "xfail", "test": "test_ops.py::test_rounding", "file": "expect.yaml", "line": 4,
        "reason": "round-half-even differs", "issue": ISSUE_12, "strict": True, "device": "cpu"}
    assert (tests["test_must"]["outcome"], tests["test_rounding_fixed"]["outcome"]) == ("error", "failed")
    assert (tests["test_timing"]["outcome"], tests["test_timing"]["reruns"]) == ("passed", 1)
    assert data["expectations"]["stale"] == [{
        "outcome": "skip", "test": "test_ops.py::test_gone", "file": "expect.yaml", "line": 15,
        "reason": "removed upstream", "devices": ["cpu"]}]
    assert data["expectations"]["decided"] == {"xfail": 2, "skip": 1, "flaky": 1, "pass": 2}
    jsonschema = pytest.importorskip("jsonschema", reason="the test extra installs jsonschema")
    from pytest_devcaps.commands.report import schema_text

    schema = json.loads(schema_text())
    jsonschema.validate(data, {"$defs": schema["$defs"], "$ref": "#/$defs/pytest"})
    bad = {**data, "tests": [{**data["tests"][0], "expectation": {"outcome": "maybe"}}]}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, {"$defs": schema["$defs"], "$ref": "#/$defs/pytest"})


PASSING = "def test_add():\n    pass\n"
STALE_ONLY = """\
expectations:
  - skip: [{test: "test_ok.py::test_gone", reason: "removed"}]
    pass: ["test_ok.py::test_add"]
"""


@pytest.mark.parametrize("how", ["option", "variable", "ini"])
def test_a_stale_rule_fails_the_run_in_strict_mode(pytester: pytest.Pytester, how: str,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    pytester.makepyfile(test_ok=PASSING)
    pytester.path.joinpath("expect.yaml").write_text(STALE_ONLY)
    args = ["--devcaps-expect=expect.yaml"]
    if how == "option":
        args.append("--devcaps-expect-strict")
    elif how == "variable":
        monkeypatch.setenv("PYTEST_DEVCAPS_EXPECT_STRICT", "1")
    else:
        pytester.makeini("[pytest]\ndevcaps_expect_strict = true\n")
    report = tmp_path / "r.json"
    result = pytester.runpytest(*args, f"--devcaps-json={report}")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["stale: expect.yaml:2: skip 'test_ok.py::test_gone' selects "
                                 "no collected test on cpu",
                                 "1 stale rule(s) in expect.yaml: the run fails (--devcaps-expect-strict)"])
    data = json.loads(report.read_text())
    assert (data["exitstatus"], data["expectations"]["strict"]) == (1, True)


def test_without_strict_mode_a_stale_rule_is_reported_and_the_run_passes(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_ok=PASSING)
    pytester.path.joinpath("expect.yaml").write_text(STALE_ONLY)
    result = pytester.runpytest("--devcaps-expect=expect.yaml")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["stale: expect.yaml:2: *", "1 stale rule(s) *: an error under "
                                 "--devcaps-expect-strict"])


def test_rules_for_files_not_collected_or_tests_deselected_are_not_stale(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_ok=PASSING, test_other="def test_b():\n    pass\n")
    pytester.path.joinpath("expect.yaml").write_text(
        "expectations:\n  - skip:\n      - {test: 'test_other.py::test_b', reason: r}\n"
        "      - {test: 'test_ok.py::test_add', reason: r}\n")
    result = pytester.runpytest("--devcaps-expect=expect.yaml", "--devcaps-expect-strict",
                                "test_ok.py", "-k", "not test_add")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result.stdout.no_fnmatch_line("stale: *")


@pytest.mark.parametrize(("text", "message"), [
    ("expectations:\n  - match: {device_type: cpu}\n    xfial: []\n",
     "*pytest-devcaps: expect.yaml:3: expectations[[]0[]].xfial: unknown key 'xfial' "
     "(did you mean 'xfail'?)*"),
    ("expectations:\n  - match: {vendr: amd}\n    pass: [a]\n",
     "*pytest-devcaps: expect.yaml:2: expectations[[]0[]].match.vendr: unknown device fact "
     "'vendr' (did you mean 'vendor'?)*"),
])
def test_a_bad_key_is_a_usage_error_naming_file_line_and_key(pytester: pytest.Pytester, text: str,
                                                            message: str) -> None:
    pytester.makepyfile(test_ok=PASSING)
    path = pytester.path.joinpath("expect.yaml")
    path.write_text(text)
    result = pytester.runpytest(f"--devcaps-expect={path}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_a_missing_file_names_its_source(pytester: pytest.Pytester,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_ok=PASSING)
    monkeypatch.setenv("PYTEST_DEVCAPS_EXPECT", "nowhere.yaml")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*PYTEST_DEVCAPS_EXPECT environment variable: expectations file "
                                 "'nowhere.yaml' does not exist*"])


def test_later_files_win_and_the_ini_key_is_relative_to_the_ini_file(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_ok=PASSING)
    config = pytester.mkdir("ci")
    config.joinpath("base.yaml").write_text(
        "expectations:\n  - skip: [{test: 'test_ok.py::test_add', reason: 'base says skip'}]\n")
    config.joinpath("night.yaml").write_text(
        "expectations:\n  - xfail: [{test: 'test_ok.py::test_add', reason: 'tonight', issue: X-1}]\n")
    pytester.makeini("[pytest]\ndevcaps_expect = ci/base.yaml ci/night.yaml\n")
    result = pytester.runpytest("-rX")
    result.assert_outcomes(xpassed=1)
    result.stdout.fnmatch_lines([
        "    1  XPASS  cpu: ci/night.yaml:2: tonight [[]issue: X-1[]]  (passes now: take it out of the file)",
        "XPASS test_ok.py::test_add - expected failure on cpu (ci/night.yaml:2): tonight [[]issue: X-1[]]"])
    result.stdout.no_fnmatch_line("stale: *")  # the base file's rule selects the test too


def test_flaky_without_pytest_rerunfailures_says_the_tests_run_once(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_ok=PASSING)
    pytester.path.joinpath("expect.yaml").write_text(
        "expectations:\n  - flaky: [{test: 'test_ok.py::test_add', reruns: 3}]\n")
    result = pytester.runpytest("--devcaps-expect=expect.yaml", "-p", "no:rerunfailures")
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(["*1 test(s) of a flaky expectation run once: pytest-rerunfailures "
                                 "is not loaded*"])


UNITTEST_SUITE = """
import unittest

from torch.testing._internal.common_utils import run_tests

from pytest_devcaps import DevcapsTestCase


class TestOps(DevcapsTestCase):
    def test_rounding(self):
        self.assertEqual(round(2.5), 3)

    def test_rounding_fixed(self):
        self.assertEqual(round(3.5), 4)

    def test_huge_alloc(self):
        raise MemoryError("would allocate 80 GB")

    def test_add(self):
        self.assertEqual(1 + 1, 2)

    @unittest.skip("skipped in the code")
    def test_must(self):
        pass

    attempts = 0

    def test_timing(self):
        type(self).attempts += 1
        self.assertGreaterEqual(type(self).attempts, 2)


if __name__ == "__main__":
    run_tests()
"""

UNITTEST_EXPECT = EXPECT.replace('"test_ops.py::', '"test_ops.py::TestOps::')


def _without_ci() -> dict[str, str]:
    return {name: value for name, value in __import__("os").environ.items() if name != "CI"}


def test_the_same_file_under_run_tests(pytester: pytest.Pytester) -> None:
    pytest.importorskip("expecttest", reason="torch.testing._internal needs expecttest")
    pytester.makepyfile(test_ops=UNITTEST_SUITE)
    pytester.path.joinpath("expect.yaml").write_text(UNITTEST_EXPECT)
    # With CI set, run_tests writes XML reports through xmlrunner (common_utils IS_CI), a
    # package PyTorch's own CI installs and ours need not: the question here is run_tests itself.
    env = {**_without_ci(), "PYTEST_DEVCAPS_EXPECT": "expect.yaml"}
    done = subprocess.run([sys.executable, "test_ops.py", "-v"], cwd=pytester.path, env=env,
                          capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    for line in [
        "test_rounding (__main__.TestOps.test_rounding) ... expected failure",
        "test_rounding_fixed (__main__.TestOps.test_rounding_fixed) ... unexpected success",
        "test_huge_alloc (__main__.TestOps.test_huge_alloc) ... skipped 'expected skip on cpu "
        "(expect.yaml:13): needs 80 GB'",
        "test_timing (__main__.TestOps.test_timing) ... ok",
        "test_add (__main__.TestOps.test_add) ... ok",
        "AssertionError: must pass on cpu (expect.yaml:22), but it was skipped: skipped in the code",
    ]:
        assert line in out, out
    assert "FAILED (failures=1, skipped=1, expected failures=1, unexpected successes=1)" in out, out


def test_a_non_strict_xfail_under_unittest_reads_as_pytest_junit_reads_it(pytester: pytest.Pytester) -> None:
    """unittest has only the strict kind: a failing non-strict xfail is a skip naming the failure
    (pytest's junit XML reports xfailed tests as skipped too); a pass is a pass."""
    pytester.makepyfile(test_soft="""
        import unittest
        from pytest_devcaps import DevcapsTestCase

        class TestSoft(DevcapsTestCase):
            def test_fails(self):
                raise ValueError("off by one\\nsecond line")

            def test_passes(self):
                pass

        if __name__ == "__main__":
            unittest.main()
    """)
    pytester.path.joinpath("e.yaml").write_text(
        "expectations:\n  - xfail: [{test: 'TestSoft', reason: 'soft', issue: 'ACME-7'}]\n")
    env = {**_without_ci(), "PYTEST_DEVCAPS_EXPECT": "e.yaml"}
    done = subprocess.run([sys.executable, "test_soft.py", "-v"], cwd=pytester.path, env=env,
                          capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert ("skipped 'xfailed: expected failure on cpu (e.yaml:2): soft [issue: ACME-7]: "
            "ValueError: off by one'") in out, out
    assert "test_passes (__main__.TestSoft.test_passes) ... ok" in out, out


def test_under_xdist_the_workers_stale_rules_reach_the_controller(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist", reason="pytest-xdist is in the test extra")
    pytester.makepyfile(test_ok=PASSING)
    pytester.path.joinpath("expect.yaml").write_text(STALE_ONLY)
    result = pytester.runpytest_subprocess("-n", "2", "--devcaps-expect=expect.yaml",
                                           "--devcaps-expect-strict")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["stale: expect.yaml:2: skip 'test_ok.py::test_gone' selects no "
                                 "collected test on cpu"])
