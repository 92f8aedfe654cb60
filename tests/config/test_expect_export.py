"""PyTorch's test_exclusions to and from an expectations file, and the files we write."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from pytest_devcaps.commands.main import main
from pytest_devcaps.config.expect_export import (
    expectations_yaml,
    from_test_exclusions,
    to_test_exclusions,
)
from pytest_devcaps.config.expectfile import Expectations, load_expectations, parse_expectations
from pytest_devcaps.config.testnames import TestName
from pytest_devcaps.config.yamlsource import parse_yaml
from pytest_devcaps.model import DeviceIdentity

H100 = DeviceIdentity(type="cuda", index=0, vendor="nvidia", name="H100", arch="sm_90")
MI300X = DeviceIdentity(type="cuda", index=0, vendor="amd", name="MI300X", arch="gfx942")

RULES = """\
expectations:
  - match: {device_type: cuda}
    skip:
      - {test: "test/nn/test_pooling.py::TestPoolingNNDeviceTypeCUDA::test_max_pool_nan_inf_cuda", reason: a}
      - {test: "TestPoolingNNDeviceType::test_adaptive_pool", reason: b}
      - {test: "TestEmbeddingNNDeviceTypeCUDA", reason: c}
      - {test: "TestPoolingNNDeviceType::test_pool_large_cuda_float16", reason: d}
      - {test: "test_lonely", reason: e}
      - {test: "TestPoolingNNDeviceType::test_max_*", reason: f}
    xfail:
      - {test: "TestPoolingNNDeviceType::test_xfailing", reason: g}
  - match: {vendor: amd}
    skip:
      - {test: "TestRocmOnly", reason: h}
"""


def load(text: str) -> Expectations:
    return Expectations(parse_expectations(parse_yaml(text, "e.yaml"), "e.yaml"))


def test_skip_rules_become_test_exclusions_and_what_the_form_cannot_say_is_named() -> None:
    found, left_out = to_test_exclusions(load(RULES), H100)
    assert found == {"TestPoolingNNDeviceType": ["test_max_pool_nan_inf", "test_adaptive_pool"],
                     "TestEmbeddingNNDeviceType": "*"}
    assert left_out == [
        "e.yaml:7: TestPoolingNNDeviceType::test_pool_large_cuda_float16: "
        "'TestPoolingNNDeviceType::test_pool_large_cuda_float16' is one dtype's instance; "
        "test_exclusions (torch 2.13) would exclude every dtype of the test",
        "e.yaml:8: test_lonely: test_exclusions is keyed by a test class: this pattern names none",
        "e.yaml:9: TestPoolingNNDeviceType::test_max_*: test_exclusions names whole generic "
        "tests: a glob or parametrization cannot be said"]
    assert to_test_exclusions(load(RULES), MI300X)[0]["TestRocmOnly"] == "*"


def test_test_exclusions_read_back_as_skips_that_select_the_generated_tests() -> None:
    entry, problems = from_test_exclusions(
        {"TestPoolingNNDeviceType": ["test_max_pool_nan_inf"], "TestEmbedding": "*",
         "TestBad": 3}, "cuda", "CUDATestBase.test_exclusions")
    assert problems == ["CUDATestBase.test_exclusions: TestBad: expected \"*\", a list or a "
                        "mapping of test names"]
    expectations = load(expectations_yaml([entry]))
    generated = TestName("t.py::TestPoolingNNDeviceTypeCUDA::test_max_pool_nan_inf_cuda_float32",
                         "TestPoolingNNDeviceType", "test_max_pool_nan_inf")
    rule = expectations.lookup(generated, H100)
    assert rule is not None and (rule.outcome, rule.reason) == (
        "skip", "excluded by CUDATestBase.test_exclusions (test_exclusions of the cuda test base)")
    whole = TestName("t.py::TestEmbeddingCUDA::test_x_cuda", "TestEmbedding", "test_x")
    assert expectations.lookup(whole, H100) is not None
    assert expectations.lookup(generated, DeviceIdentity(type="cpu", index=None, vendor="",
                                                         name="", arch="")) is None


def test_the_commands_convert_both_ways(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    exclusions = tmp_path / "exclusions.json"
    exclusions.write_text(json.dumps({"TestFoo": ["test_a"], "TestBar": "*"}))
    rules = tmp_path / "rules.yaml"
    assert main(["report", "expect", "--from-exclusions", str(exclusions), "--device-type", "xpu",
                 "-o", str(rules)]) == 0
    assert [(r.outcome, r.pattern) for r in load_expectations([rules]).rules()] == [
        ("skip", "TestFoo::test_a"), ("skip", "TestBar")]
    assert main(["report", "expect", "--to-exclusions", str(rules), "--device-type", "xpu"]) == 0
    assert json.loads(capsys.readouterr().out) == {"TestFoo": ["test_a"], "TestBar": "*"}
    (tmp_path / "cuda.yaml").write_text(textwrap.dedent(RULES))
    assert main(["report", "expect", "--to-exclusions", str(tmp_path / "cuda.yaml"),
                 "--profile", "amd-mi300x"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["TestRocmOnly"] == "*"
    assert "devcaps report expect: left out: " in captured.err
    assert main(["report", "expect", "--to-exclusions", str(rules)]) == 2
    assert "needs --device-type" in capsys.readouterr().err
