"""devcaps report merge: devices by host, duplicates merged, conflicts and disagreements kept,
every format version read or refused by name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_devcaps.commands.main import main
from pytest_devcaps.report import ReportError, load_source, merge, parse_argument
from pytest_devcaps.commands.report import merged

import fleet_data as data


def _cell(fleet: dict[str, Any], capability: str, device: str) -> dict[str, Any]:
    return next(c for c in fleet["cells"] if c["capability"] == capability and c["device"] == device)


def _suite(fleet: dict[str, Any], suite: str, device: str) -> dict[str, Any]:
    return next(r for r in fleet["suites"] if r["suite"] == suite and r["device"] == device)


def test_torchrun_ranks_merge_into_one_host(tmp_path: Path) -> None:
    fleet = merged([data.write(tmp_path, f"rank{r}.json", data.node1_rank(r)) for r in (0, 1)])
    assert [d["id"] for d in fleet["devices"]] == ["node1/cpu", "node1/cuda:0", "node1/cuda:1",
                                                   "node1/-"]
    by_id = {d["id"]: d for d in fleet["devices"]}
    assert by_id["node1/cuda:0"]["ranks"] == [0] and by_id["node1/cuda:1"]["ranks"] == [1]
    assert by_id["node1/-"]["ranks"] == [0, 1]
    # each rank repeats the host's answers: one cell, both reports as its sources
    cell = _cell(fleet, "dtype.fp8_e4m3fn", "node1/cuda:1")
    assert cell["level"] == "native" and cell["answers"] == [
        {"level": "native", "reason": "sm_90 has fp8", "source": "vendor-rule", "sources": [0, 1]}]
    assert fleet["conflicts"] == []
    assert _suite(fleet, "pytest", "node1/cuda:1")["failing"] == ["test_dist.py::test_allreduce[cuda]"]
    assert _suite(fleet, "pytest", "node1/cuda:0")["counts"] == {"passed": 3}
    teardown = data.node1_rank(0)
    teardown["tests"][0]["teardown"] = "error"  # passed, then its teardown failed
    row = _suite(merged([data.write(tmp_path, "t.json", teardown)]), "pytest", "node1/cuda:0")
    assert row["counts"] == {"error": 1, "passed": 2} and row["failing"] == [
        "test_gemm.py::test_fp8[cuda]"]
    host_tests = _suite(fleet, "pytest", "node1/-")  # run by both ranks: counted once
    assert host_tests["counts"] == {"passed": 1} and fleet["summary"]["duplicate_tests"] == 1
    assert [s["rank"] for s in fleet["sources"]] == [0, 1]


def test_different_levels_are_a_conflict_that_keeps_every_answer(tmp_path: Path) -> None:
    fleet = merged([data.write(tmp_path, "a.json", data.node2_probe("native")),
                    data.write(tmp_path, "b.json", data.node2_probe("unsupported"))])
    cell = _cell(fleet, "dtype.fp8_e4m3fn", "node2/cuda:0")
    assert cell["level"] == "conflict"
    assert [(a["level"], a["sources"]) for a in cell["answers"]] == [("native", [0]),
                                                                   ("unsupported", [1])]
    assert fleet["conflicts"] == [{"capability": "dtype.fp8_e4m3fn", "device": "node2/cuda:0",
                                   "levels": ["native", "unsupported"]}]
    assert _cell(fleet, "dtype.bf16", "node2/cuda:0")["level"] == "native"
    assert fleet["summary"]["capability_conflicts"] == 1


def test_a_test_the_reports_disagree_about_counts_with_its_worst_outcome(tmp_path: Path) -> None:
    fleet = merged([data.write(tmp_path, "passed.json", data.cpu_check("passed")),
                    data.write(tmp_path, "failed.json", data.cpu_check("failed"))])
    row = _suite(fleet, "kernels", "cpuhost/cpu")
    assert row["counts"] == {"failed": 1, "passed": 1, "skipped-by-capability": 1}
    assert row["failing"] == ["test_scaled_mm.py::test_bf16[cpu]"]
    assert row["disagreements"] == [{"nodeid": "test_scaled_mm.py::test_bf16[cpu]",
                                     "outcomes": {"passed": [0], "failed": [1]}}]
    assert fleet["summary"]["duplicate_tests"] == 3


def test_one_host_name_with_different_hardware_is_two_devices(tmp_path: Path) -> None:
    other = data.node2_probe("native")
    other["devices"] = [data.gpu(0)]  # an H100 behind the same host name
    fleet = merged([data.write(tmp_path, "a.json", data.node2_probe("native")),
                    data.write(tmp_path, "b.json", other)])
    assert [(d["id"], d["name"]) for d in fleet["devices"]] == [
        ("node2/cuda:0", "AMD Instinct MI300X"), ("node2/cuda:0#2", "NVIDIA H100 80GB HBM3")]
    assert _cell(fleet, "dtype.fp8_e4m3fn", "node2/cuda:0#2")["answers"][0]["sources"] == [1]
    assert fleet["conflicts"] == []


def test_older_formats_are_read(tmp_path: Path) -> None:
    legacy_check = [{"suite": "fsdp", "exit_code": 0, "seconds": 30.0,
                     "counts": {"cpu": {"passed": 9, "skipped-by-capability": 2}}}]
    old_pytest = data.node1_rank(0)
    for key in ("kind", "host", "rank", "world_size"):  # pytest-devcaps 0.1.0 wrote none of them
        del old_pytest[key]
    old_pytest["format"] = 1
    fleet = merged([data.write(tmp_path, "check-0.1.json", legacy_check),
                    "mine=" + data.write(tmp_path, "pytest-0.1.json", old_pytest)])
    assert [(s["kind"], s["format"], s["host"], s["suites"]) for s in fleet["sources"]] == [
        ("check", 0, "(unknown host)", ["fsdp"]), ("pytest", 1, "(unknown host)", ["mine"])]
    assert _suite(fleet, "fsdp", "(unknown host)/cpu")["counts"] == {
        "passed": 9, "skipped-by-capability": 2}
    assert _suite(fleet, "mine", "(unknown host)/cuda:0")["counts"] == {"passed": 3}


def test_a_plan_report_is_its_profile_not_this_host(tmp_path: Path) -> None:
    plan = data.node1_rank(0)
    plan.update(mode="plan", meta={"profile": "amd-mi300x"},
                tests=[data.entry("t.py::test_a[cuda]", "cuda:0", "would-skip", missing=True)])
    fleet = merged([data.write(tmp_path, "plan.json", plan)])
    assert fleet["sources"][0]["kind"] == "plan"
    assert _suite(fleet, "pytest", "plan:amd-mi300x/cuda:0")["counts"] == {"would-skip": 1}


@pytest.mark.parametrize("document, message", [
    ({**data.node2_probe("native"), "format": 2},
     "format: probe report format 2 is newer than this pytest-devcaps reads (up to 1); "
     "upgrade pytest-devcaps to merge it"),
    ({**data.node2_probe("native"), "format": "1"}, "format: expected a format version"),
    ({k: v for k, v in data.node2_probe("native").items() if k != "format"},
     "format: expected a format version (an int >= 1), got None"),
    ({**data.node2_probe("native"), "kind": "probes"},
     "kind: expected kind 'pytest', 'check', 'probe', 'fleet', got 'probes'"),
    ({"format": 1, "kind": "fleet"}, "kind: already a fleet report: merge the reports it was made from"),
    ("hello", "expected a devcaps report (a JSON object), got a string"),
    ({**data.node2_probe("native"), "capabilities": [{"capability": "x", "device": "cuda:0"}]},
     "capabilities[0].level: expected a level (native, emulated, unsupported, unknown), got None"),
    ({**data.cpu_check(), "suites": [{"suite": "kernels", "tests": [{"outcome": "passed"}]}]},
     "suites[0].tests[0].nodeid: expected a test id, got None"),
    ({**data.node1_rank(0), "rank": "0"}, "rank: expected an int, got a string"),
    ([{"suite": "x", "counts": {"cpu": {"passed": "9"}}}],
     "[0].counts.cpu.passed: expected a count (an int >= 0), got '9'"),
])
def test_a_bad_report_names_file_and_key(tmp_path: Path, document: Any, message: str) -> None:
    path = data.write(tmp_path, "bad.json", document)
    with pytest.raises(ReportError) as error:
        load_source(path)
    assert str(error.value).startswith(f"{path}: {message}")


def test_unreadable_inputs(tmp_path: Path) -> None:
    (tmp_path / "broken.json").write_text('{"format": 1,\n "kind": }')
    with pytest.raises(ReportError, match=r"broken.json:2: not JSON: Expecting value"):
        load_source(str(tmp_path / "broken.json"))
    with pytest.raises(ReportError, match="missing.json: no such file"):
        load_source(str(tmp_path / "missing.json"))
    with pytest.raises(ReportError, match=": not read: a directory, not a regular file"):
        load_source(str(tmp_path))


def test_suite_names_on_the_command_line(tmp_path: Path) -> None:
    existing = tmp_path / "odd=name.json"
    existing.write_text("{}")
    assert parse_argument("fsdp=reports/a.json") == ("reports/a.json", "fsdp")
    assert parse_argument(str(existing)) == (str(existing), None)
    assert parse_argument("reports/x=y.json") == ("reports/x=y.json", None)


def test_merge_command_writes_the_fleet_and_tells_what_it_merged(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = data.write(tmp_path, "a.json", data.node2_probe("native"))
    b = data.write(tmp_path, "b.json", data.node2_probe("unknown"))
    c = data.write(tmp_path, "c.json", data.cpu_check())
    out = tmp_path / "fleet.json"
    assert main(["report", "merge", a, b, c, "-o", str(out)]) == 1  # a test failed
    fleet = json.loads(out.read_text())
    assert fleet["format"] == 2 and fleet["kind"] == "fleet" and fleet["passed"] is False
    assert [s["file"] for s in fleet["sources"]] == [a, b, c]
    err = capsys.readouterr().err
    assert "devcaps report: FAILED: 3 report(s), 2 host(s), 2 device(s), 1 failing test(s)" in err
    assert "conflict: dtype.fp8_e4m3fn on node2/cuda:0: native vs unknown" in err
    assert main(["report", "merge", a, str(tmp_path / "nope.json"), "-o", str(out)]) == 2
    assert "nope.json: no such file" in capsys.readouterr().err


def test_the_merge_is_the_same_whichever_way_the_sources_are_listed(tmp_path: Path) -> None:
    sources = [load_source(data.write(tmp_path, f"{i}.json", doc)) for i, doc in
               enumerate([data.node1_rank(0), data.node1_rank(1), data.cpu_check()])]
    forward, backward = merge(sources), merge(sources[::-1])
    assert [d["id"] for d in forward["devices"]] == [d["id"] for d in backward["devices"]]
    assert [(r["suite"], r["device"], r["counts"]) for r in forward["suites"]] == \
        [(r["suite"], r["device"], r["counts"]) for r in backward["suites"]]
