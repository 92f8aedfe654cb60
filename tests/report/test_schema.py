"""Every document pytest-devcaps writes matches the published JSON Schema, whose format
versions are the ones the code writes and reads."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from pytest_devcaps.commands.main import main
from pytest_devcaps.commands.report import merged, schema_text
from pytest_devcaps.report.formats import FORMATS
from pytest_devcaps.report.sources import load_source

import fleet_data as data

jsonschema = pytest.importorskip("jsonschema", reason="the test extra installs jsonschema")


def _validate(document: Any, kind: str) -> None:
    schema = json.loads(schema_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(document, schema)  # exactly one kind matches (oneOf)
    jsonschema.validate(document, {"$defs": schema["$defs"], "$ref": f"#/$defs/{kind}"})


def test_schema_versions_are_the_code_s() -> None:
    defs = json.loads(schema_text())["$defs"]
    assert {kind: defs[kind]["properties"]["format"]["const"] for kind in FORMATS} == dict(FORMATS)
    assert {kind: defs[kind]["properties"]["kind"]["const"] for kind in FORMATS} == \
        {kind: kind for kind in FORMATS}


def test_the_schema_command_prints_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "schema"]) == 0
    assert json.loads(capsys.readouterr().out)["title"] == "pytest-devcaps reports"


def test_a_pytest_report_and_its_fleet_match(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.requires_capability("runtime.graphs")
        def test_graphs(device):
            pass

        def test_plain(device):
            pass

        @pytest.mark.xfail(reason="known")
        def test_known():
            assert False
    """)
    report = tmp_path / "run.json"
    result = pytester.runpytest("--devcaps-devices=cpu", "--devcaps-set=runtime.graphs=unsupported",
                                f"--devcaps-json={report}")
    result.assert_outcomes(passed=1, skipped=1, xfailed=1)
    document = json.loads(report.read_text())
    _validate(document, "pytest")
    fleet = merged([f"mine={report}"])
    _validate(fleet, "fleet")
    row = next(r for r in fleet["suites"] if r["device"].endswith("/cpu"))
    assert row["suite"] == "mine" and row["counts"] == {"passed": 1, "skipped-by-capability": 1}
    assert load_source(str(report)).kind == "pytest"


def test_a_probe_report_matches() -> None:
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["probe", "--json", "--profile", "amd-mi300x"]) == 0
    document = json.loads(out.getvalue())
    _validate(document, "probe")
    assert document["format"] == FORMATS["probe"] and document["host"]


def test_the_example_fleet_matches(tmp_path: Path) -> None:
    fleet = merged([data.write(tmp_path, "r0.json", data.node1_rank(0)),
                    data.write(tmp_path, "a.json", data.node2_probe("native")),
                    data.write(tmp_path, "b.json", data.node2_probe("unknown")),
                    data.write(tmp_path, "c.json", data.cpu_check())])
    for kind, document in (("pytest", data.node1_rank(0)), ("probe", data.node2_probe("native")),
                           ("check", data.cpu_check()), ("fleet", fleet)):
        _validate(document, kind)
