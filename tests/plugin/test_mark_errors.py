"""A bad devcaps mark errors only its own test, as pytest's ``skipif`` with a bad condition does:
the module's other tests are collected and run (issue 20)."""

from __future__ import annotations

import pytest


def test_a_bad_mark_errors_its_test_and_the_module_runs_on(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.requires_memory("lots")
        def test_bad_size(device):
            pass

        @pytest.mark.requires_capability("dtype.bf61")
        def test_typo():
            pass

        @pytest.mark.dtypes()
        def test_no_dtypes(dtype):
            pass

        def test_fine(device):
            pass

        @pytest.mark.requires_capability("dtype.bf16")
        def test_also_fine():
            pass
        """
    )
    result = pytester.runpytest("--devcaps-devices=cpu", "--devcaps-set=dtype.bf16=emulated")
    result.assert_outcomes(passed=2, errors=3)
    result.stdout.fnmatch_lines([
        "*ERROR at setup of test_bad_size*",
        "*::test_bad_size: requires_memory: size must be a size like '24GiB'*, got 'lots'",
        "*ERROR at setup of test_typo*",
        "*::test_typo: requires_capability: argument 1: unknown capability 'dtype.bf61' (did you mean 'dtype.bf16'?)",
        "*ERROR at setup of test_no_dtypes*",
        "*::test_no_dtypes: dtypes: needs at least one torch.dtype",
    ])
    result.stdout.no_fnmatch_line("*Traceback*")
    result.stdout.no_fnmatch_line("*error during collection*")


def test_the_same_mark_under_pytest_skipif_behaves_the_same(pytester: pytest.Pytester) -> None:
    """The yardstick: pytest's own skipif with a condition that raises errors one test."""
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.skipif("1/0", reason="x")
        def test_bad():
            pass

        def test_fine():
            pass
        """
    )
    pytester.runpytest().assert_outcomes(passed=1, errors=1)
