"""The test's tolerance rule holds on upcast comparisons (the rule is the test's, by its dtype
parameter), a failed comparison says which rule applied, and NaN or infinite tolerances are
refused."""

from __future__ import annotations

import pytest
import torch

from pytest_devcaps.config.facts import builtin_vocabulary
from pytest_devcaps.errors import MarkerError
from pytest_devcaps.marks.tolerances import Tolerances, parse_tolerance
from pytest_devcaps.model import DeviceIdentity

CPU = DeviceIdentity(type="cpu", index=None, vendor="cpu", name="cpu", arch="avx2",
                     memory_bytes=None, count=1, torch_version="")


def _tolerances(*marks: dict[str, object], dtype: object = torch.bfloat16) -> Tolerances:
    facts = builtin_vocabulary()
    return Tolerances([parse_tolerance((), m, facts) for m in marks], CPU, dtype)


def _bf16_result() -> tuple[torch.Tensor, torch.Tensor]:
    """A bf16 computation and its fp32 reference: about 1e-2 apart, over fp32's defaults."""
    torch.manual_seed(0)
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    return (a.bfloat16() @ b.bfloat16()), a @ b


def test_an_upcast_comparison_keeps_the_test_s_rule() -> None:
    got, ref = _bf16_result()
    tolerances = _tolerances({"dtype": torch.bfloat16, "atol": 0.5, "rtol": 0.05})
    with pytest.raises(AssertionError):  # the fp32 defaults: the comparison needs the rule
        torch.testing.assert_close(got.float(), ref)
    tolerances.assert_close(got.float(), ref)   # upcast: the bf16 test's rule
    tolerances.assert_close(got, ref.bfloat16())
    assert tolerances.kwargs(torch.float32) == {"atol": 0.5, "rtol": 0.05}
    assert tolerances.kwargs() == {"atol": 0.5, "rtol": 0.05}


def test_a_rule_naming_the_compared_dtype_is_still_the_test_s_second_choice() -> None:
    tolerances = _tolerances({"dtype": torch.float32, "atol": 1e-6, "rtol": 1e-6},
                             {"dtype": torch.bfloat16, "atol": 0.5, "rtol": 0.05})
    assert tolerances.for_comparison(torch.float32).atol == 0.5   # the test's dtype first
    assert tolerances.kwargs(torch.float32) == {"atol": 1e-6, "rtol": 1e-6}  # asked by name
    only_fp32 = _tolerances({"dtype": torch.float32, "atol": 1e-3, "rtol": 0.0})
    assert only_fp32.for_comparison(torch.float32).atol == 1e-3   # no bf16 rule: fp32's own


def test_integers_and_tests_without_a_dtype_keep_their_own_rules() -> None:
    tolerances = _tolerances({"dtype": torch.bfloat16, "atol": 0.5, "rtol": 0.05})
    assert tolerances.kwargs(torch.int64) == {}    # exact comparisons stay exact
    assert tolerances.for_comparison(torch.int64) is None
    plain = _tolerances({"dtype": torch.bfloat16, "atol": 0.5, "rtol": 0.05}, dtype=None)
    assert plain.kwargs(torch.float32) == {} and plain.kwargs(torch.bfloat16)["atol"] == 0.5
    named = _tolerances({"dtype": "bfloat16", "atol": 0.5, "rtol": 0.05}, dtype="bfloat16")
    assert named.for_comparison(torch.float32).atol == 0.5   # a dtype parameter given by name


def test_a_failure_says_which_rule_applied() -> None:
    got, ref = _bf16_result()
    tolerances = _tolerances({"dtype": torch.bfloat16, "atol": 1e-4, "rtol": 0.0})
    with pytest.raises(AssertionError) as error:
        tolerances.assert_close(got.float(), ref)
    assert str(error.value).endswith(
        "\ntolerance: atol=0.0001, rtol=0 from tolerance(dtype=bfloat16) on cpu (tensors of "
        "float32 in a bfloat16 test)")
    assert "Tensor-likes are not close!" in str(error.value)


def test_a_failure_without_a_rule_or_with_explicit_values_says_so() -> None:
    got, ref = _bf16_result()
    none = _tolerances({"dtype": torch.float16, "atol": 1.0, "rtol": 1.0})
    with pytest.raises(AssertionError) as error:
        none.assert_close(got.float(), ref)
    assert str(error.value).endswith(
        "\ntolerance: no tolerance rule for this test on cpu: torch.testing.assert_close's "
        "defaults (tensors of float32 in a bfloat16 test)")
    ruled = _tolerances({"dtype": torch.bfloat16, "atol": 0.5, "rtol": 0.05})
    with pytest.raises(AssertionError) as error:
        ruled.assert_close(got.float(), ref, atol=1e-6, rtol=0.0)
    assert str(error.value).endswith(
        "\ntolerance: atol=1e-06, rtol=0.0 given to assert_close over tolerance(dtype=bfloat16) "
        "on cpu (tensors of float32 in a bfloat16 test)")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), -1.0, "x", True])
def test_nan_and_infinite_tolerances_are_refused(value: object) -> None:
    for name in ("atol", "rtol"):
        marks = {"atol": 1.0, "rtol": 1.0, name: value}
        with pytest.raises(MarkerError, match=f"{name}= takes a finite number >= 0, got"):
            parse_tolerance((), marks, builtin_vocabulary())


def test_the_fixture_holds_a_bf16_test_to_its_rule(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest
        import torch

        @pytest.mark.tolerance(dtype=torch.bfloat16, atol=0.5, rtol=0.05)
        @pytest.mark.parametrize("dtype", [torch.bfloat16])
        def test_matmul(dtype, tolerances):
            torch.manual_seed(0)
            a, b = torch.randn(64, 64), torch.randn(64, 64)
            got = a.to(dtype) @ b.to(dtype)
            tolerances.assert_close(got.float(), a @ b)
            assert tolerances.kwargs(torch.float32) == {"atol": 0.5, "rtol": 0.05}

        @pytest.mark.tolerance(dtype=torch.bfloat16, atol=1e-4, rtol=0.0)
        @pytest.mark.parametrize("dtype", [torch.bfloat16])
        def test_too_tight(dtype, tolerances):
            torch.manual_seed(0)
            a, b = torch.randn(64, 64), torch.randn(64, 64)
            tolerances.assert_close((a.to(dtype) @ b.to(dtype)).float(), a @ b)
    """)
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*tolerance: atol=0.0001, rtol=0 from tolerance(dtype=bfloat16) "
                                 "on cpu (tensors of float32 in a bfloat16 test)*"])
