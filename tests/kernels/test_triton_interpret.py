"""Runs ``triton_interpret_cases.py`` under TRITON_INTERPRET=1 in a fresh Python process.

triton decorates its own helpers at import, so the variable must be set before triton is
imported: hence a subprocess. Deselect with ``-m "not triton_interpret"``.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

CASES = Path(__file__).with_name("triton_interpret_cases.py")
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.triton_interpret
def test_triton_kernel_under_interpreter(pytester, monkeypatch):
    # find_spec, not import: pytester drops modules imported during the test, and triton's
    # native extension aborts the process when it is imported a second time.
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed: the Triton backend is optional")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    result = pytester.runpytest_subprocess(str(CASES), "-q", "-p", "no:cacheprovider",
                                           f"--rootdir={REPO}", "-W", "ignore::DeprecationWarning")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == 0 and outcomes.get("error", 0) == 0, result.stdout.str()
    assert outcomes.get("passed", 0) >= 22, result.stdout.str()
