"""Expectations files: the schema (file:line:key errors with the closest valid name), how tests
are named (node ids, Class::method, globs, PyTorch's generated and generic names) and which rule
decides a test on a device (later wins, defaults)."""

from __future__ import annotations

import textwrap

import pytest

from pytest_devcaps.config.expectfile import Expectations, parse_expectations
from pytest_devcaps.config.testnames import TestName, pytorch_generic_names, selects
from pytest_devcaps.config.yamlsource import parse_yaml
from pytest_devcaps.errors import ConfigError
from pytest_devcaps.model import DeviceIdentity

CPU = DeviceIdentity(type="cpu", index=None, vendor="amd", name="EPYC", arch="avx2")
H100 = DeviceIdentity(type="cuda", index=0, vendor="nvidia", name="H100", arch="sm_90",
                      facts={"sm": 90})
MI300X = DeviceIdentity(type="cuda", index=0, vendor="amd", name="MI300X", arch="gfx942")

ISSUE_EXAMPLE = """\
expectations:
  - match: {device_type: cpu}          # the overrides' match: vendor, arch, facts
    xfail:
      - test: "test_ops.py::test_rounding"
        reason: "round-half-even differs"
        issue: "https://github.com/acme/backend/issues/12"
        strict: true
    skip:
      - test: "test_ops.py::test_huge*"
        reason: "needs 80 GB"
    flaky:
      - test: "test_ops.py::test_timing"
        reruns: 2
    pass:
      - test: "test_ops.py::test_add"
"""


def load(text: str) -> Expectations:
    return Expectations(parse_expectations(parse_yaml(textwrap.dedent(text), "e.yaml"), "e.yaml"))


def decide(expectations: Expectations, nodeid: str, device: DeviceIdentity = CPU,
           **generic: str) -> tuple[str, int | None] | None:
    rule = expectations.lookup(TestName(nodeid, **generic), device)
    return None if rule is None else (rule.outcome, rule.line)


def test_the_issue_example_loads_and_decides_each_test() -> None:
    expectations = load(ISSUE_EXAMPLE)
    assert decide(expectations, "tests/test_ops.py::test_rounding") == ("xfail", 4)
    assert decide(expectations, "tests/test_ops.py::test_huge_alloc[80]") == ("skip", 9)
    assert decide(expectations, "test_ops.py::test_timing") == ("flaky", 12)
    assert decide(expectations, "test_ops.py::test_add") == ("pass", 15)
    assert decide(expectations, "test_ops.py::test_other") is None
    assert decide(expectations, "test_ops.py::test_add", H100) is None  # match: cpu only
    rule = expectations.lookup(TestName("test_ops.py::test_rounding"), CPU)
    assert rule is not None and rule.strict and rule.text("cpu") == (
        "expected failure on cpu (e.yaml:4): round-half-even differs "
        "[issue: https://github.com/acme/backend/issues/12]")
    flaky = expectations.lookup(TestName("test_ops.py::test_timing"), CPU)
    assert flaky is not None and (flaky.reruns, flaky.delay) == (2, 0.0)


@pytest.mark.parametrize(("text", "where", "words"), [
    ("expectations:\n  - match: {device_type: cpu}\n    xfial: []\n", "e.yaml:3: expectations[0].xfial",
     "unknown key 'xfial' (did you mean 'xfail'?)"),
    ("expectations:\n  - match: {vendr: amd}\n    skip: [{test: a, reason: b}]\n",
     "e.yaml:2: expectations[0].match.vendr", "unknown device fact 'vendr' (did you mean 'vendor'?)"),
    ("expectations:\n  - xfail:\n      - test: a\n        reasn: b\n", "e.yaml:4: expectations[0].xfail[0].reasn",
     "unknown key 'reasn' (did you mean 'reason'?)"),
    ("expectations:\n  - skip:\n      - test: a\n", "e.yaml:3: expectations[0].skip[0]",
     "a skip rule needs reason"),
    ("expectations:\n  - flaky:\n      - test: a\n        reruns: 0\n",
     "e.yaml:4: expectations[0].flaky[0].reruns", "must be at least 1"),
    ("expectations:\n  - default: skp\n", "e.yaml:2: expectations[0].default",
     "unknown default 'skp' (did you mean 'skip'?)"),
    ("expectations:\n  - match: {type: cpu}\n", "e.yaml:2: expectations[0]",
     "an entry lists tests under xfail, skip, flaky, pass or sets a default"),
    ("expectatons: []\n", "e.yaml:1: expectatons", "(did you mean 'expectations'?)"),
    ("devcaps: 2\nexpectations: []\n", "e.yaml:1: devcaps", "unsupported schema version 2"),
    ("expectations:\n  - xfail:\n      - test: a\n        reason: b\n        strict: yes please\n",
     "e.yaml:5: expectations[0].xfail[0].strict", "expected true or false"),
    ("expectations:\n  - match: {device_type: cpu, type: cuda}\n    pass: [a]\n",
     "e.yaml:2: expectations[0].match.type", "'device_type' and 'type' name the same fact"),
])
def test_a_bad_file_names_file_line_key_and_the_closest_valid_name(text: str, where: str,
                                                                    words: str) -> None:
    with pytest.raises(ConfigError) as error:
        load(text)
    assert str(error.value).startswith(where + ": "), str(error.value)
    assert words in str(error.value)


def test_later_rules_and_entries_win_and_the_last_default_applies() -> None:
    expectations = load("""\
        expectations:
          - default: {outcome: skip, reason: "not brought up yet", issue: ACME-1}
            pass: ["TestOps"]
            skip: [{test: "TestOps::test_slow*", reason: slow}]
          - match: {vendor: amd}
            xfail: [{test: "TestOps::test_slow_sort", reason: "rocm bug", strict: true}]
        """)
    assert decide(expectations, "t.py::TestOps::test_add", MI300X) == ("pass", 3)
    assert decide(expectations, "t.py::TestOps::test_slow_scan", MI300X) == ("skip", 4)
    assert decide(expectations, "t.py::TestOps::test_slow_sort", MI300X) == ("xfail", 6)
    assert decide(expectations, "t.py::TestOps::test_slow_sort", H100) == ("skip", 4)
    default = expectations.lookup(TestName("t.py::test_other"), H100)
    assert default is not None and default.is_default
    assert default.text("cuda:0") == ("expected skip on cuda:0 (e.yaml:2): not brought up yet "
                                      "[issue: ACME-1]")


@pytest.mark.parametrize(("pattern", "selected"), [
    ("tests/nn/test_pool.py::TestPoolCUDA::test_max_cuda_float32[size3]", True),
    ("nn/test_pool.py::TestPoolCUDA::test_max_cuda_float32", True),   # every parametrization
    ("test_pool.py", True),                                           # the whole file
    ("TestPoolCUDA", True),                                           # the whole class
    ("TestPool::test_max", True),                                     # PyTorch's generic names
    ("TestPool::test_max_cuda_float32", True),
    ("TestPoolCUDA::test_max", True),
    ("test_max", True),
    ("TestPool::test_max_cuda_*", True),
    ("*::test_max_cuda_float??[size3]", True),                        # [ is literal
    ("test_pool.py::test_max", False),                                # a node id names its class
    ("TestPool::test_max_cuda_float64", False),
    ("TestPoolCPU::test_max", False),
    ("pool.py::TestPool::test_max", False),                           # paths split on /
    ("TestPool::test_ma", False),
    ("test_max[size*", False),                                        # no param on the generic
])
def test_how_a_pattern_selects_a_generated_pytorch_test(pattern: str, selected: bool) -> None:
    name = TestName("tests/nn/test_pool.py::TestPoolCUDA::test_max_cuda_float32[size3]",
                    generic_class="TestPool", generic_test="test_max")
    assert selects(pattern, name) is selected


def test_pytorch_generic_names_come_from_the_class_device_type_and_the_wrapped_name() -> None:
    assert pytorch_generic_names("TestPoolCUDA", "cuda", "test_max_cuda_float32", "test_max") == \
        ("TestPool", "test_max")
    assert pytorch_generic_names("TestFooPRIVATEUSE1", "acme", "test_x_acme", "test_x") == \
        ("TestFoo", "test_x")
    assert pytorch_generic_names("TestOps", None, "test_add", "test_add") == (None, None)
    assert pytorch_generic_names("CUDA", "cuda", "test_a", "test_a") == (None, None)


def test_entries_match_with_the_overrides_match_and_when() -> None:
    expectations = load("""\
        expectations:
          - match: {vendor: nvidia, arch: [sm_89, sm_90]}
            when: "sm >= 90"
            skip: [{test: test_fp8, reason: "no fp8 kernels yet"}]
        """)
    assert decide(expectations, "t.py::test_fp8", H100) == ("skip", 4)
    assert decide(expectations, "t.py::test_fp8", MI300X) is None
    assert decide(expectations, "t.py::test_fp8", CPU) is None


def test_a_list_of_tests_gives_each_its_own_line_and_a_bare_string_is_a_test() -> None:
    expectations = load("""\
        expectations:
          - skip:
              - test:
                  - test_a
                  - test_b
                reason: both
            pass:
              - test_c
        """)
    assert decide(expectations, "t.py::test_a") == ("skip", 4)
    assert decide(expectations, "t.py::test_b") == ("skip", 5)
    assert decide(expectations, "t.py::test_c") == ("pass", 8)
    assert [rule.line for rule in expectations.rules()] == [4, 5, 8]
