"""A fleet report cannot go green on a failed run: exit statuses, collection errors, crashed
check suites, missing, repeated and impossible ranks all fail the summary, stderr, the exit
code and the page."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_devcaps.commands.main import main
from pytest_devcaps.report import ReportError, load_source
from pytest_devcaps.commands.report import merged

import fleet_data as data


def _passing_rank(rank: int, world_size: int = 2, host: str = "node1") -> dict[str, Any]:
    report = data.node1_rank(0)
    report.update(rank=rank, world_size=world_size, host=host, exitstatus=0,
                  tests=[data.entry("t.py::test_ok", None, "passed")])
    return report


def test_a_collection_error_run_is_failing_not_green(pytester: pytest.Pytester) -> None:
    """pytest's own JSON report records the exit status and the collection error; the merge
    counts the error as a failing entry and the exit status as a failed report."""
    pytester.makepyfile(test_ok="def test_ok():\n    pass\n",
                        test_broken="import no_such_module_for_devcaps\n")
    report = pytester.path / "run.json"
    result = pytester.runpytest(f"--devcaps-json={report}")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    document = json.loads(report.read_text())
    assert document["exitstatus"] == 2
    assert [e["nodeid"] for e in document["collection_errors"]] == ["test_broken.py"]
    assert "no_such_module_for_devcaps" in document["collection_errors"][0]["longrepr"]
    fleet = merged([str(report)])
    assert fleet["passed"] is False
    assert fleet["summary"]["failing_tests"] == 1 and fleet["summary"]["failed_reports"] == 1
    row = next(r for r in fleet["suites"] if r["failing"])
    assert row["failing"] == ["test_broken.py"] and row["counts"] == {"error": 1}
    assert fleet["sources"][0]["failed"] == [
        "exit status 2 (interrupted: a collection error, Ctrl-C or a signal)"]


def _hostile_fleet_files(tmp_path: Path) -> list[str]:
    """An internal error with no tests, a crashed check suite, rank 0 of a world of 3 twice
    and rank 2 alone (rank 1 missing), and a collection error."""
    internal = _passing_rank(0, 1, host="node9")
    internal.update(exitstatus=3, tests=[])
    crashed = data.cpu_check("passed")
    crashed["suites"].append({"suite": "fsdp", "exit_code": -11, "seconds": 0.4, "counts": {},
                              "tests": []})
    collection = _passing_rank(0, 1, host="node8")
    collection.update(exitstatus=2, collection_errors=[{"nodeid": "", "longrepr": "boom"}])
    world = [_passing_rank(0, 3), _passing_rank(0, 3), _passing_rank(2, 3)]
    return [data.write(tmp_path, "internal.json", internal),
            data.write(tmp_path, "crashed.json", crashed),
            data.write(tmp_path, "collection.json", collection),
            *(data.write(tmp_path, f"world{i}.json", doc) for i, doc in enumerate(world))]


def test_every_kind_of_failed_run_fails_summary_stderr_exit_code_and_page(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = _hostile_fleet_files(tmp_path)
    out = tmp_path / "fleet.json"
    assert main(["report", "merge", *files, "-o", str(out)]) == 1
    fleet = json.loads(out.read_text())
    summary = fleet["summary"]
    assert fleet["passed"] is False
    assert (summary["failed_reports"], summary["missing_ranks"], summary["repeated_ranks"],
            summary["failing_tests"]) == (3, 1, 1, 1)
    assert fleet["ranks"] == [{"suite": "pytest", "run_id": None, "hosts": ["node1"],
                               "world_size": 3, "sources": [3, 4, 5], "ranks": [0, 2],
                               "missing": [1], "repeated": [0]}]
    err = capsys.readouterr().err
    assert "devcaps report: FAILED: 6 report(s)" in err
    for expected in ("internal.json) failed: exit status 3 (internal error)",
                     "crashed.json) failed: suite fsdp exited -11 with 0 test(s)",
                     "collection.json) failed: exit status 2",
                     "world of 3 on node1: no report from rank(s) 1",
                     "world of 3 on node1: rank(s) 0 reported more than once"):
        assert expected in err, err
    page = tmp_path / "fleet.html"
    assert main(["report", "html", str(out), "-o", str(page)]) == 1
    text = page.read_text()
    assert '<p id="verdict" class="verdict bad">FAILED</p>' in text
    assert "no report from rank(s) 1" in text and "exit status 3 (internal error)" in text
    assert "(collection)" in text  # the session-level collection error, a failing entry


def test_a_run_that_passed_is_green(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = [data.write(tmp_path, f"r{r}.json", _passing_rank(r)) for r in (0, 1)]
    assert main(["report", "merge", *files, "-o", str(tmp_path / "f.json")]) == 0
    assert "devcaps report: passed: 2 report(s)" in capsys.readouterr().err


def test_exit_status_1_without_a_failing_test_is_a_failed_report(tmp_path: Path) -> None:
    """Rank 0 whose peer vanished: its own tests passed, its exit status says the run failed."""
    zero = _passing_rank(0)
    zero.update(exitstatus=1, peers={"failed": [], "silent": [1]})
    fleet = merged([data.write(tmp_path, "r0.json", zero)])
    assert fleet["sources"][0]["failed"] == [
        "exit status 1 (tests failed) but no failing test in the report",
        "rank 1 never reported its results (rank 0 says: it died or hung)"]
    assert fleet["ranks"][0]["missing"] == [1] and fleet["passed"] is False


def test_ranks_of_different_runs_are_different_worlds(tmp_path: Path) -> None:
    """Two torchrun runs (their run ids) of one host each have their rank 0 and 1."""
    files = []
    for run in ("aaa", "bbb"):
        for rank in (0, 1):
            files.append(data.write(tmp_path, f"{run}{rank}.json",
                                    {**_passing_rank(rank), "run_id": run}))
    fleet = merged(files)
    assert [(g["run_id"], g["ranks"], g["missing"], g["repeated"]) for g in fleet["ranks"]] == [
        ("aaa", [0, 1], [], []), ("bbb", [0, 1], [], [])]
    assert fleet["passed"] is True


@pytest.mark.parametrize("fields, message", [
    ({"rank": -1}, "rank: rank -1 is not a rank of world_size 2 (0 to 1)"),
    ({"rank": 2}, "rank: rank 2 is not a rank of world_size 2 (0 to 1)"),
    ({"world_size": 0, "rank": 0}, "world_size: world_size 0 is not a world"),
    ({"world_size": None}, "world_size: rank 1 with world_size None"),
    ({"exitstatus": None}, "exitstatus: expected the session's exit status"),
    ({"exitstatus": True}, "exitstatus: expected an int, got bool"),
    ({"peers": {"silent": [-3]}}, "peers.silent: expected ranks"),
    ({"collection_errors": [{"nodeid": 7}]}, "collection_errors[0].nodeid: expected a string"),
])
def test_impossible_ranks_and_statuses_are_refused(tmp_path: Path, fields: dict[str, Any],
                                                   message: str) -> None:
    path = data.write(tmp_path, "bad.json", {**_passing_rank(1), **fields})
    with pytest.raises(ReportError) as error:
        load_source(path)
    assert str(error.value).startswith(f"{path}: {message}")
    assert main(["report", "merge", path, "-o", str(tmp_path / "f.json")]) == 2


def test_a_check_suite_exit_code_must_be_there(tmp_path: Path) -> None:
    check = data.cpu_check()
    del check["suites"][0]["exit_code"]
    with pytest.raises(ReportError, match=r"suites\[0\]\.exit_code: expected the suite's exit"):
        load_source(data.write(tmp_path, "c.json", check))
    legacy = [{"suite": "fsdp", "exit_code": 2, "seconds": 1.0, "counts": {}}]
    fleet = merged([data.write(tmp_path, "legacy.json", legacy)])
    assert fleet["sources"][0]["failed"] == ["suite fsdp exited 2 with 0 test(s)"]
