"""Markers: requires_capability, requires_devices, requires_memory, dtypes; typo handling."""

from __future__ import annotations

import pytest


def test_requires_capability_skip_names_capability_device_level_and_source(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.requires_capability("dtype.bf16")
        def test_needs_bf16(device):
            pass

        @pytest.mark.requires_capability("dtype.fp64")
        def test_needs_fp64(device):
            pass
        """
    )
    result = pytester.runpytest("-rs", "--devcaps-devices=cpu", "--devcaps-set=dtype.bf16=unsupported")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*requires dtype.bf16 on cpu: unsupported (cli: set on the command line)*"])


def test_any_of_needs_one_alternative(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.requires_capability(any_of=["dtype.bf16", "dtype.fp16"])
        def test_one_half_type(device):
            pass

        @pytest.mark.requires_capability(any_of=["dtype.tf32", "runtime.graphs"])
        def test_none_present(device):
            pass
        """
    )
    result = pytester.runpytest("-rs", "--devcaps-devices=cpu", "--devcaps-set=dtype.bf16=unsupported",
                                "--devcaps-set=dtype.fp16=native", "--devcaps-set=dtype.tf32=unsupported",
                                "--devcaps-set=runtime.graphs=unsupported")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*requires any of dtype.tf32, runtime.graphs on cpu: dtype.tf32 unsupported*"])


def test_native_refuses_emulated(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.requires_capability("dtype.bf16", native=True)
        def test_native(device):
            pass

        @pytest.mark.requires_capability("dtype.bf16")
        def test_any(device):
            pass
        """
    )
    result = pytester.runpytest("-rs", "--devcaps-devices=cpu", "--devcaps-set=dtype.bf16=emulated")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*requires native dtype.bf16 on cpu: emulated*"])


def test_unknown_capability_errors_the_test_with_closest_name(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.requires_capability("dtype.fp8_e4m3")
        def test_typo(device):
            pass
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)  # the test errors, as under pytest's skipif; not the module
    result.stdout.fnmatch_lines(["*unknown capability 'dtype.fp8_e4m3' (did you mean 'dtype.fp8_e4m3fn'?)*"])


def test_unknown_capability_in_any_of_and_class_mark(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.requires_capability(any_of=["attention.flsh"])
        class TestThing:
            def test_a(self):
                pass
        """
    )
    result = pytester.runpytest()
    result.stdout.fnmatch_lines(["*did you mean 'attention.flash'*"])
    result.assert_outcomes(errors=1)


def test_bad_marker_arguments_error_the_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.requires_capability("dtype.bf16", nativ=True)
        def test_kw():
            pass
        """
    )
    result = pytester.runpytest()
    result.stdout.fnmatch_lines(["*unexpected keyword*nativ*"])
    result.assert_outcomes(errors=1)


def test_requires_devices(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.requires_devices(1)
        def test_one(device):
            pass

        @pytest.mark.requires_devices(64)
        def test_many(device):
            pass
        """
    )
    result = pytester.runpytest("-rs", "--devcaps-devices=cpu")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*requires 64 cpu devices; found 1*"])


def test_requires_memory(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.requires_memory("1MiB")
        def test_small(device):
            pass

        @pytest.mark.requires_memory("1000TiB")
        def test_huge(device):
            pass

        @pytest.mark.requires_memory("1MiB", per_allocation="1000TiB")
        def test_huge_allocation(device):
            pass
        """
    )
    result = pytester.runpytest("-rs", "--devcaps-devices=cpu")
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines(["*requires 1000TiB memory on cpu; found *GiB*",
                                 "*requires a single 1000TiB allocation on cpu*"])


def test_requires_memory_bad_size(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.requires_memory("lots")
        def test_x():
            pass
        """
    )
    # -rN: no short summary, whose line (cut or not by the terminal width) would repeat the message.
    result = pytester.runpytest("-rN")
    result.stdout.fnmatch_lines(["*requires_memory: size must be a size like '24GiB'*, got 'lots'"])
    # A MarkerError errors the test, shown once: no traceback, no exception chain.
    assert result.stdout.str().count("must be a size like") == 1
    result.stdout.no_fnmatch_line("*During handling*")
    result.stdout.no_fnmatch_line("*Traceback*")
    result.assert_outcomes(errors=1)


def test_marker_errors_are_devcaps_errors() -> None:
    from pytest_devcaps.errors import DevcapsError, MarkerError
    from pytest_devcaps.marks.evaluation import parse_size

    with pytest.raises(MarkerError) as info:
        parse_size("lots")
    assert isinstance(info.value, DevcapsError) and info.value.marker == "requires_memory"
    assert info.value.__suppress_context__ or info.value.__context__ is None


def test_dtypes_parametrize_and_skip_missing_dtype_with_capability(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        import torch

        @pytest.mark.dtypes(torch.float32, torch.bfloat16, torch.float64)
        def test_add(device, dtype):
            x = torch.ones(2, device=device, dtype=dtype)
            assert (x + x).dtype == dtype
        """
    )
    result = pytester.runpytest("-v", "-rs", "--devcaps-devices=cpu", "--devcaps-set=dtype.fp64=unsupported")
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines([
        "*test_add?cpu-float32? PASSED*",
        "*test_add?cpu-bfloat16? PASSED*",
        "*test_add?cpu-float64? SKIPPED*",
        "SKIPPED [1] test_dtypes_parametrize_and_skip_missing_dtype_with_capability.py:4: "
        "requires dtype.fp64 on cpu: unsupported (cli: set on the command line)",
    ])


def test_tests_without_device_fixture_use_primary_device(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.requires_capability("dtype.fp16")
        def test_plain():
            pass
        """
    )
    result = pytester.runpytest("-rs", "--devcaps-set=dtype.fp16=unsupported")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*requires dtype.fp16 on *: unsupported*"])


def test_markers_are_registered_and_strict_markers_clean(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest, torch

        @pytest.mark.requires_capability("dtype.fp64")
        @pytest.mark.requires_devices(1)
        @pytest.mark.requires_memory("1KiB")
        @pytest.mark.dtypes(torch.float32)
        def test_all(device, dtype):
            pass
        """
    )
    result = pytester.runpytest("--strict-markers")
    result.assert_outcomes(passed=1)
    markers = pytester.runpytest("--markers")
    markers.stdout.fnmatch_lines([
        "@pytest.mark.requires_capability(*capabilities, any_of=None, native=False):*",
        "@pytest.mark.requires_devices(n):*",
        "@pytest.mark.requires_ranks(n):*",
        "@pytest.mark.requires_memory(size, per_allocation=None, free=False):*",
        "@pytest.mark.dtypes(*dtypes, when=None):*",
        "@pytest.mark.skip_on(when, reason):*",
        "@pytest.mark.xfail_on(when, reason, strict=False, raises=None):*",
        "@pytest.mark.tolerance(dtype=None, atol, rtol, when=None):*",
        "@pytest.mark.hardware(cls):*",
    ])


def test_per_allocation_cap_unknown_on_capped_backend() -> None:
    from pytest_devcaps.marks.evaluation import evaluate
    from pytest_devcaps.model import DeviceIdentity
    from pytest_devcaps.config import load_catalogue
    from pytest_devcaps.registry import CapabilityRegistry

    def registry(facts: dict) -> CapabilityRegistry:
        device = DeviceIdentity(type="mps", index=0, vendor="apple", name="Apple M3", arch="apple-m3",
                                memory_bytes=64 * 2**30, facts=facts)
        return CapabilityRegistry([device], {"mps:0": {}}, load_catalogue())

    mark = pytest.mark.requires_memory("8GiB", per_allocation="4GiB").mark
    capped_unknown = evaluate([mark], registry({"max_allocation_bytes": None}), "mps:0")
    assert [m.key for m in capped_unknown.missing] == ["allocation>=4GiB"]
    assert "the largest allowed is unknown" in capped_unknown.reason
    capped = evaluate([mark], registry({"max_allocation_bytes": 2 * 2**30}), "mps:0")
    assert "the largest allowed is 2GiB" in capped.reason
    uncapped = evaluate([mark], registry({}), "mps:0")
    assert not uncapped.skip


def test_every_marker_the_plugin_recognises_by_name_has_a_signature() -> None:
    """The plugin's hooks pick devcaps marks by name (``marker_names``) before importing
    ``markers``: the two lists must name the same markers."""
    from pytest_devcaps.marks.names import MARKER_NAMES
    from pytest_devcaps.marks.evaluation import SIGNATURES

    assert MARKER_NAMES == set(SIGNATURES) and len(MARKER_NAMES) == 9
