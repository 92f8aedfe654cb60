"""The standard-library schema check gives jsonschema's verdicts on fleet documents."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Callable

import pytest

from pytest_devcaps.commands.report import merged, schema_text
from pytest_devcaps.report.validate import SchemaMismatch, validate

import fleet_data as data

jsonschema = pytest.importorskip("jsonschema", reason="the test extra installs jsonschema")

SPOILERS: list[Callable[[dict[str, Any]], Any]] = [
    lambda f: None,
    lambda f: f["summary"].update(reports="3"),
    lambda f: f["summary"].update(reports=True),
    lambda f: f["summary"].update(reports=2.5),
    lambda f: f.pop("ranks"),
    lambda f: f.update(passed=1),
    lambda f: f.update(kind="pytest"),
    lambda f: f["cells"][0]["answers"].clear(),
    lambda f: f["sources"][0].update(rank=-1),
    lambda f: f["sources"][0].update(exitstatus="0"),
    lambda f: f["devices"][0].update(ranks=["0"]),
    lambda f: f["suites"][0].update(failing=[1]),
    lambda f: f["conflicts"].append({"capability": "x", "device": "y", "levels": ["conflict"]}),
    lambda f: f["ranks"].append({"suite": "s", "run_id": None, "hosts": [], "world_size": 1,
                                 "sources": [], "ranks": [], "missing": [], "repeated": []}),
]


@pytest.mark.parametrize("spoil", range(len(SPOILERS)))
def test_same_verdict_as_jsonschema(tmp_path: Path, spoil: int) -> None:
    fleet = merged([data.write(tmp_path, f"r{r}.json", data.node1_rank(r)) for r in (0, 1)]
                   + [data.write(tmp_path, "c.json", data.cpu_check())])
    document = copy.deepcopy(fleet)
    SPOILERS[spoil](document)
    schema = json.loads(schema_text())
    reference = {"$defs": schema["$defs"], "$ref": "#/$defs/fleet"}
    expected = jsonschema.Draft202012Validator(reference).is_valid(document)
    try:
        validate(document, schema, "fleet")
        verdict = True
    except SchemaMismatch:
        verdict = False
    assert verdict == expected and verdict == (spoil == 0)
