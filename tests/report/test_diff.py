"""devcaps report diff: two runs of one suite of ours (one test fixed, one broken, one newly
skipped, an xfail that passes now, a capability that holds now) in every format, exit 1 on a
regression; fleet documents on either side; devcaps report expect --from a run's failures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_devcaps.commands.main import main

SUITE = """
import os
import pytest

NIGHT = os.environ["DEVCAPS_TEST_NIGHT"]

def test_fixed():
    assert NIGHT == "2", "off by one"

def test_broken():
    assert NIGHT == "1", "broke tonight"

def test_newly_skipped():
    if NIGHT == "2":
        pytest.skip("needs the new driver")

def test_known():
    assert NIGHT == "2"

@pytest.mark.requires_capability("dtype.fp8_e4m3fn")
def test_fp8():
    pass

def test_steady():
    pass
"""

EXPECT = """\
expectations:
  - xfail: [{test: "test_nightly.py::test_known", reason: "rounding", issue: "ACME-1"}]
"""


@pytest.fixture(scope="module")
def runs(pytester_module: Path) -> tuple[str, str]:
    return str(pytester_module / "base.json"), str(pytester_module / "new.json")


@pytest.fixture(scope="module")
def pytester_module(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two nights of one suite: night 1 without fp8 (--devcaps-set), night 2 with it."""
    import os
    import subprocess
    import sys

    folder = tmp_path_factory.mktemp("nightly")
    (folder / "test_nightly.py").write_text(SUITE)
    (folder / "expect.yaml").write_text(EXPECT)
    for night, level, name in (("1", "unsupported", "base.json"), ("2", "native", "new.json")):
        env = {**os.environ, "DEVCAPS_TEST_NIGHT": night, "PYTEST_ADDOPTS": "-p no:randomly"}
        subprocess.run([sys.executable, "-m", "pytest", "-q", "--devcaps-expect=expect.yaml",
                        f"--devcaps-set=dtype.fp8_e4m3fn={level}@cpu", f"--devcaps-json={name}",
                        "-p", "no:cacheprovider"], cwd=folder, env=env, capture_output=True,
                       timeout=300)
    return folder


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["report", "diff", *args])
    return code, capsys.readouterr().out


def test_text_lists_each_change_per_device_and_exits_1(runs: tuple[str, str],
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, *runs)
    assert code == 1
    base, new = runs
    assert out.splitlines() == [
        f"devcaps report diff: {base} -> {new}",
        "-:",
        "  newly failing (1):",
        "    test_nightly.py::test_broken  passed -> failed: AssertionError: broke tonight",
        "  passing now (2):",
        "    test_nightly.py::test_fixed  failed -> passed: was failing",
        "    test_nightly.py::test_known  xfailed -> xpassed: the xfail passes now: take it out of "
        "expect.yaml:2",
        "  newly skipped (1):",
        "    test_nightly.py::test_newly_skipped  passed -> skipped-other: needs the new driver",
        "cpu:",
        "  passing now (1):",
        "    test_nightly.py::test_fp8  skipped-by-capability -> passed: dtype.fp8_e4m3fn on cpu "
        "holds now",
        "summary: 1 newly failing, 3 passing now, 1 newly skipped, 0 reason changed, 0 gone, 0 new tests",
        "REGRESSION: 1 change(s) counted as regressions",
    ]


def test_markdown_json_and_github_say_the_same(runs: tuple[str, str],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    code, markdown = run(capsys, *runs, "--format", "markdown")
    assert code == 1
    assert markdown.startswith("### devcaps: :x: REGRESSION: 1 change(s) counted as regressions\n")
    assert "| newly failing | `test_nightly.py::test_broken` | passed | failed | AssertionError: " \
           "broke tonight |" in markdown
    assert "| newly skipped | `test_nightly.py::test_newly_skipped` | passed | skipped-other | " \
           "needs the new driver |" in markdown
    code, text = run(capsys, *runs, "--format", "json")
    data = json.loads(text)
    assert (code, data["regressions"], data["passed"]) == (1, 1, False)
    assert data["summary"] == {"newly_failing": 1, "newly_passing": 3, "newly_skipped": 1,
                               "reason_changed": 0, "gone": 0, "new": 0}
    no_device = next(row for row in data["devices"] if row["device"] == "-")
    assert [c["nodeid"] for c in no_device["newly_passing"]] == [
        "test_nightly.py::test_fixed", "test_nightly.py::test_known"]
    code, github = run(capsys, *runs, "--format", "github")
    lines = github.splitlines()
    assert code == 1
    assert lines[0] == ("::error file=test_nightly.py,title=newly failing on -::"
                        "test_nightly.py::test_broken: passed -> failed: AssertionError: broke tonight")
    assert ("::warning file=test_nightly.py,title=newly skipped on -::test_nightly.py::"
            "test_newly_skipped: passed -> skipped-other: needs the new driver") in lines
    assert lines[-1].startswith("::error title=devcaps report diff::REGRESSION: 1 change(s)")


def test_the_same_run_twice_is_no_regression_and_fail_on_widens_it(runs: tuple[str, str],
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    base, new = runs
    code, out = run(capsys, new, new)
    assert (code, out.splitlines()[-2:]) == (0, [
        "summary: 0 newly failing, 0 passing now, 0 newly skipped, 0 reason changed, 0 gone, 0 new tests",
        "no regression"])
    code, out = run(capsys, new, base)  # backwards: test_fixed fails again, nothing new skipped
    assert code == 1
    code, _ = run(capsys, base, new, "--fail-on", "skipped")
    assert code == 1  # test_newly_skipped alone counts now
    assert main(["report", "diff", base, new, "--fail-on", "skiped"]) == 2
    assert "unknown --fail-on 'skiped' (did you mean 'skipped'?)" in capsys.readouterr().err


def test_a_fleet_on_either_side_compares_failing_ids(runs: tuple[str, str], tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    base, new = runs
    for name, source in (("base-fleet.json", base), ("new-fleet.json", new)):
        assert main(["report", "merge", source, "-o", str(tmp_path / name)]) == 1
    capsys.readouterr()
    code, out = run(capsys, str(tmp_path / "base-fleet.json"), new)
    assert code == 1
    assert "    test_nightly.py::test_broken  not failing -> failed: AssertionError: broke tonight" in out
    assert "    test_nightly.py::test_fixed  failed -> passed: was failing" in out  # the fleet lists it
    assert "  newly skipped (" not in out  # a fleet does not say what passed before
    code, out = run(capsys, base, str(tmp_path / "new-fleet.json"))
    assert code == 1
    assert (f"    test_nightly.py::test_fixed  failed -> not failing: not among "
            f"{tmp_path / 'new-fleet.json'}'s failing tests") in out
    assert "note: a fleet document keeps only its failing tests" in out


def test_an_unreadable_side_is_a_usage_error_naming_the_file(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{\"kind\": \"pytest\", \"format\": 9}")
    assert main(["report", "diff", str(bad), str(bad)]) == 2
    assert f"{bad}: format: pytest report format 9 is newer" in capsys.readouterr().err


def test_expect_from_a_run_writes_its_failures_as_xfail_rules(runs: tuple[str, str], tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    _, new = runs
    out = tmp_path / "started.yaml"
    assert main(["report", "expect", "--from", new, "-o", str(out)]) == 0
    text = out.read_text()
    assert "  - match: {device_type: \"cpu\", vendor: \"cpu\"" in text
    assert "      - test: \"test_nightly.py::test_broken\"\n" in text
    assert "        reason: \"failed in " in text and "AssertionError: broke tonight\"" in text
    assert "        strict: false\n        # issue:" in text
    from pytest_devcaps.config.expectfile import load_expectations

    rules = list(load_expectations([out]).rules())
    assert [(r.outcome, r.pattern) for r in rules] == [("xfail", "test_nightly.py::test_broken")]
