"""Per-device expectations: skip_on, xfail_on, tolerance, dtypes(when=), requires_memory(free=True)."""

from __future__ import annotations

import pytest


def test_skip_on_names_the_condition_and_the_facts(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.skip_on("vendor == 'cpu' and cores >= 1", reason="known broken on CPUs")
        def test_broken_here(device):
            pass

        @pytest.mark.skip_on(when="vendor == 'nvidia' and compute_capability < 9.0", reason="sm_89 bug")
        def test_broken_elsewhere(device):
            pass
        """
    )
    result = pytester.runpytest("-rs", "--devcaps-devices=cpu")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines_random([
        "SKIPPED * skip_on(vendor == 'cpu' and cores >= 1) holds on cpu (cores=*, vendor=cpu): "
        "known broken on CPUs",
        "*1  skip_on(vendor == 'cpu' and cores >= 1) on cpu: cores=*, vendor=cpu (marker)",
    ])


@pytest.mark.parametrize(("mark", "message"), [
    ("skip_on(\"compute_capabilty < 9.0\", reason='x')",
     "skip_on: when='compute_capabilty < 9.0': unknown device fact 'compute_capabilty' "
     "(did you mean 'compute_capability'?); device facts are: *"),
    ("skip_on(\"vendor == 'cpu'\")", "skip_on: needs reason=*"),
    ("skip_on(\"vendor == 'cpu'\", reasn='x')",
     "skip_on: unexpected keyword argument 'reasn' (did you mean 'reason'?); it takes when=, reason="),
    ("xfail_on(\"__import__('os')\", reason='x')", "xfail_on: when=*: function call *is not allowed*"),
    ("xfail_on(\"vendor == 'cpu'\", reason='x', strict='yes')", "xfail_on: strict= takes True or False*"),
    ("tolerance(dtype='float61', atol=1, rtol=1)", "tolerance: dtype='float61' is not a torch dtype (did you mean 'float64'?)"),
    ("tolerance(atol=1)", "tolerance: needs both atol= and rtol= (missing rtol=)"),
    ("dtypes(when={'cuda': (torch.float16,)})", "dtypes: needs at least one torch.dtype"),
    ("dtypes(torch.float32, when={'cdua': (torch.float16,)})",
     "dtypes: when= key 'cdua' is not a device type or vendor (did you mean 'cuda'?)"),
    ("dtypes(torch.float32, when={'cuda': ('float16',)})",
     "dtypes: argument 1 must be a torch.dtype, got 'float16' (write torch.float16)"),
    ("requires_memory('1GB', free=1)", "requires_memory: free= must be True or False, got 1"),
])
def test_bad_arguments_error_the_test(pytester: pytest.Pytester, mark: str, message: str) -> None:
    pytester.makepyfile(
        f"""
        import pytest
        import torch

        @pytest.mark.{mark}
        def test_x(device, dtype):
            pass
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)  # that test errors at setup; the module is not cut short
    result.stdout.fnmatch_lines([f"*test_x: {message}*"])


def test_xfail_on_becomes_pytest_xfail_where_it_holds(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.xfail_on("type == 'cpu'", reason="wrong on CPUs")
        def test_fails_here(device):
            assert False

        @pytest.mark.xfail_on("type == 'cpu'", reason="fixed", strict=True)
        def test_passes_strict(device):
            pass

        @pytest.mark.xfail_on("type == 'cpu'", reason="a KeyError", raises=KeyError)
        def test_other_error(device):
            raise ValueError("not a KeyError")

        @pytest.mark.xfail_on("type == 'xpu'", reason="not this device")
        def test_not_expected_here(device):
            pass
        """
    )
    result = pytester.runpytest("-rxX", "--devcaps-devices=cpu", "--junitxml=junit.xml")
    result.assert_outcomes(passed=1, xfailed=1, failed=2)
    result.stdout.fnmatch_lines_random([
        "XFAIL *test_fails_here[[]cpu[]] - xfail_on(type == 'cpu') holds on cpu (type=cpu): wrong on CPUs",
        "*[[]XPASS(strict)[]] xfail_on(type == 'cpu') holds on cpu (type=cpu): fixed",
        "*ValueError: not a KeyError",
    ])
    assert 'name="devcaps_xfail_on"' in (pytester.path / "junit.xml").read_text()


def test_tolerances_follow_device_and_dtype(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        import torch

        pytestmark = pytest.mark.tolerance(atol=1e-5, rtol=1e-5)

        @pytest.mark.dtypes(torch.float32, torch.float16)
        @pytest.mark.tolerance(dtype=torch.float16, atol=0.5, rtol=0.0, when="vendor == 'cpu'")
        @pytest.mark.tolerance(dtype=torch.float16, atol=9.0, rtol=9.0, when="vendor == 'nvidia'")
        @pytest.mark.tolerance(dtype=torch.float16, atol=1e-3, rtol=1e-3)
        def test_close(device, dtype, tolerances):
            expected = {torch.float32: (1e-5, 1e-5), torch.float16: (0.5, 0.0)}[dtype]
            assert (tolerances.atol, tolerances.rtol) == expected
            actual = torch.tensor([1.0], dtype=dtype)
            if dtype == torch.float16:
                tolerances.assert_close(actual, torch.tensor([1.4], dtype=dtype))
                with pytest.raises(AssertionError):
                    tolerances.assert_close(actual, torch.tensor([1.6], dtype=dtype))

        def test_none(tolerances):
            assert tolerances.for_dtype(torch.float16).source == "tolerance(every dtype) on cpu"
        """
    )
    # A subprocess: assert_close imports torch.distributed.tensor, which registers torch
    # libraries that an in-process run's module cleanup would make a later import register twice.
    pytester.runpytest_subprocess("--devcaps-devices=cpu").assert_outcomes(passed=3)


def test_dtypes_per_device_type(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        import torch

        @pytest.mark.dtypes(torch.float32, when={"cpu": (torch.float64, torch.bfloat16),
                                                 "cuda": (torch.float16,)})
        def test_per_device(device, dtype):
            pass

        @pytest.mark.dtypes(torch.float32, when={"amd": (torch.float16,)})
        def test_default(device, dtype):
            pass

        @pytest.mark.dtypes(torch.float8_e4m3fn, when={"xpu": (torch.float16,)})
        def test_lacking(device, dtype):
            pass
        """
    )
    result = pytester.runpytest("-v", "-rs", "--devcaps-devices=cpu",
                                "--devcaps-set=dtype.fp8_e4m3fn=unsupported")
    result.assert_outcomes(passed=3, skipped=1)
    result.stdout.fnmatch_lines_random([
        "*test_per_device[[]cpu-float64[]] PASSED*", "*test_per_device[[]cpu-bfloat16[]] PASSED*",
        "*test_default[[]cpu-float32[]] PASSED*",
        "*requires dtype.fp8_e4m3fn on cpu: unsupported (cli: set on the command line)",
    ])


def test_free_memory_is_read_at_setup(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    import pytest_devcaps.runtime

    monkeypatch.setattr(pytest_devcaps.runtime, "free_memory", lambda device: 3 * 2**20)
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.requires_memory("2MiB", free=True)
        def test_fits(device):
            pass

        @pytest.mark.requires_memory("4MiB", free=True)
        def test_does_not_fit(device):
            pass

        @pytest.mark.requires_memory("4MiB")
        def test_total_only(device):
            pass
        """
    )
    result = pytester.runpytest("-rs", "--devcaps-devices=cpu")
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines(["*requires 4MiB free memory on cpu; found 3MiB free"])


def test_a_module_dtypes_mark_leaves_device_only_tests_per_device(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        import torch

        pytestmark = pytest.mark.dtypes(torch.float32, torch.float64)

        def test_device_only(device):
            pass

        def test_both(device, dtype):
            pass
        """
    )
    result = pytester.runpytest("-v", "--devcaps-devices=cpu")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines_random(["*test_device_only[[]cpu[]] PASSED*",
                                        "*test_both[[]cpu-float64[]] PASSED*"])


@pytest.mark.parametrize(("condition", "runtime", "holds_there"), [
    ("runtime_version < 12.10", "12.8", True),     # as floats 12.8 < 12.1 is False: versions, not floats
    ("runtime_version >= 12.10", "12.8", False),
    ("runtime_version >= '12.10'", "12.10", True),
    ("torch_version >= 2.10", "2.9", False),
])
def test_conditions_compare_version_facts_as_versions(condition: str, runtime: str,
                                                       holds_there: bool) -> None:
    from pytest_devcaps.marks.conditions import compile_condition, holds
    from pytest_devcaps.config.facts import builtin_vocabulary
    from pytest_devcaps.model import DeviceIdentity

    identity = DeviceIdentity(type="cuda", index=0, vendor="nvidia", name="GPU", arch="sm_90",
                              torch_version=runtime, runtime_version=runtime)
    expression = compile_condition("skip_on", condition, builtin_vocabulary())
    assert holds(expression, identity) is holds_there


def test_conditions_refuse_a_fact_no_backend_declares() -> None:
    from pytest_devcaps.marks.conditions import compile_condition
    from pytest_devcaps.errors import MarkerError
    from pytest_devcaps.config.facts import builtin_vocabulary

    with pytest.raises(MarkerError, match="unknown device fact 'vendr' \\(did you mean 'vendor'\\?\\)"):
        compile_condition("skip_on", "vendr == 'nvidia'", builtin_vocabulary())
