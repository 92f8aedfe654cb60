from __future__ import annotations

import pytest

from pytest_devcaps.config import compile_expression
from pytest_devcaps.errors import ConfigError

FACTS = {
    "vendor": "nvidia",
    "arch": "sm_90",
    "compute_capability": 9.0,
    "sm": 90,
    "cuda_version": "12.8",
    "rocm_version": "6.10",
    "isa": ["avx2", "avx512", "amx_bf16"],
    "has_fp64": True,
    "cudnn_version": None,
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("compute_capability >= 8.9", True),
        ("compute_capability < 8.9", False),
        ("sm == 90 and vendor == 'nvidia'", True),
        ("sm == 90 and vendor == 'amd'", False),
        ("sm == 80 or vendor == 'nvidia'", True),
        ("sm == 80 or vendor == 'amd'", False),
        ("not sm == 80", True),
        ("not (sm == 90 or sm == 80)", False),
        ("80 <= sm < 100", True),
        ("80 <= sm < 90", False),
        ("arch in ['sm_89', 'sm_90']", True),
        ("arch in ('sm_80', 'sm_86')", False),
        ("arch not in ['sm_80']", True),
        ("'amx_bf16' in isa", True),
        ("'amx_fp16' in isa", False),
        ("'amx_fp16' not in isa", True),
        ("has_fp64", True),
        ("has_fp64 == True", True),
        ("True", True),
        ("None", False),
        ("sm != 90", False),
        ("sm > -1", True),
    ],
)
def test_truth_table(text: str, expected: bool) -> None:
    assert compile_expression(text).evaluate(FACTS) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("rocm_version >= '6.3'", True),  # 6.10 > 6.3 as versions, not as strings
        ("rocm_version < '6.9'", False),
        ("cuda_version == '12.8.0'", True),
        ("cuda_version >= '12'", True),
        ("cuda_version > 12.4", True),  # a number against a version string
        ("cuda_version in ['12.8.0', '13.0']", True),
        ("'6.3.1-rc2' > '6.3'", True),
        ("'2.13.0+cpu' >= '2.13'", True),
    ],
)
def test_versions_compare_as_versions(text: str, expected: bool) -> None:
    assert compile_expression(text).evaluate(FACTS) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("xe_generation >= 2", False),  # missing fact: None, ordering is False
        ("xe_generation < 2", False),
        ("not xe_generation >= 2", True),
        ("cudnn_version >= 90000", False),  # present but None
        ("cudnn_version == None", True),
        ("cudnn_version != None", False),
        ("gcn_arch == 'gfx942'", False),
        ("gcn_arch != 'gfx942'", True),
        ("'amx_bf16' in missing_list", False),
        ("'amx_bf16' not in missing_list", True),
        ("arch > 5", False),  # unrelated types: False, not TypeError
        ("sm in 5", False),
    ],
)
def test_missing_and_none_facts_never_raise(text: str, expected: bool) -> None:
    assert compile_expression(text).evaluate(FACTS) is expected


def test_expression_keeps_text_and_names() -> None:
    expression = compile_expression("sm >= 80 and 'x' in isa")
    assert expression.text == "sm >= 80 and 'x' in isa"
    assert expression.names == {"sm", "isa"}


@pytest.mark.parametrize(
    ("text", "construct"),
    [
        ("x.__class__", "attribute access"),
        ("arch.startswith('sm')", "function call"),
        ("__import__('os')", "function call"),
        ("open('x')", "function call"),
        ("isa[0] == 'avx2'", "subscript"),
        ("(lambda: 1)", "lambda"),
        ("[x for x in isa]", "comprehension"),
        ("any(x for x in isa)", "function call"),
        ("{x for x in isa}", "comprehension"),
        ("{k: 1 for k in isa}", "comprehension"),
        ("f'{arch}' == 'sm_90'", "f-string"),
        ("sm * 2 > 100", "arithmetic"),
        ("-sm < 0", "arithmetic"),
        ("sm if arch else 0", "conditional expression"),
        ("(y := 1)", "assignment expression"),
        ("{'a': 1}", "dict literal"),
        ("{1, 2}", "set literal"),
        ("__builtins__", "dunder"),
        ("b'x' == arch", "bytes literal"),
        ("... == arch", "ellipsis literal"),
    ],
)
def test_refused_constructs_name_the_construct(text: str, construct: str) -> None:
    with pytest.raises(ConfigError) as info:
        compile_expression(text, file="caps.yaml", line=7, key="vendors.x.when")
    error = info.value
    assert construct in error.message.lower()
    assert (error.file, error.line, error.key) == ("caps.yaml", 7, "vendors.x.when")
    assert "caps.yaml:7" in str(error)


@pytest.mark.parametrize("text", ["import os", "sm >=", "", "   ", "sm = 1"])
def test_syntax_errors_are_config_errors(text: str) -> None:
    with pytest.raises(ConfigError):
        compile_expression(text)


def test_is_operator_refused_with_hint() -> None:
    with pytest.raises(ConfigError, match="=="):
        compile_expression("cudnn_version is None")

