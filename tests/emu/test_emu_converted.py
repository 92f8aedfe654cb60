"""Issue 27: a converted file runs on a device that is not CUDA. The golden inputs of the lint
(tests/lint/golden/) and their ``--target devcaps`` conversions run under the plugin with 2 emu
devices next to the CPU; no test may do worse than the original did, per test and device."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Callable

import pytest

pytest.importorskip("libcst", reason="--fix needs the lint extra (pytest-devcaps[lint])")
from pytest_devcaps.lint.fix import fix_text  # noqa: E402

GOLDEN = Path(__file__).resolve().parent.parent / "lint" / "golden"
FILES = ("multiprocess_style", "device_type_style", "torchao_style", "overlap_style")
BAD = ("failure", "error")


def outcomes(path: Path, tmp_path: Path) -> dict[str, str]:
    """Test name (the function, device suffixes and ids dropped) -> the worst outcome of its
    instances: passed < skipped < failed/error."""
    report = tmp_path / f"{path.stem}.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                    f"--junitxml={report}", str(path)], capture_output=True, text=True, timeout=900,
                   cwd=path.parent, check=False)
    worst: dict[str, str] = {}
    rank = {"passed": 0, "skipped": 1, "failure": 2, "error": 2}
    for case in ET.parse(report).getroot().iter("testcase"):
        name = case.get("name", "").split("[")[0]
        for suffix in ("_cpu", "_emu", "_privateuse1"):
            name = name.removesuffix(suffix)
        kinds = [c.tag for c in case if c.tag in ("failure", "error", "skipped")] or ["passed"]
        outcome = max(kinds, key=lambda k: rank[k])
        if rank[outcome] >= rank.get(worst.get(name, "passed"), 0):
            worst[name] = outcome
    return worst


@pytest.mark.parametrize("name", FILES)
def test_converted_file_is_no_worse_on_emu(name: str, tmp_path: Path, emu_env: Callable[[int], None]) -> None:
    emu_env(2)
    source = (GOLDEN / f"{name}.py.txt").read_text()
    original, converted = tmp_path / "original", tmp_path / "converted"
    original.mkdir()
    converted.mkdir()
    (original / f"test_{name}.py").write_text(source)
    (converted / f"test_{name}.py").write_text(fix_text(source, f"test_{name}.py").after)
    before = outcomes(original / f"test_{name}.py", tmp_path)
    after = outcomes(converted / f"test_{name}.py", tmp_path)
    assert after, (before, after)  # the original may have no test off CUDA (only_for="cuda")
    worse = {t: (before.get(t), o) for t, o in after.items() if o in BAD and before.get(t) not in BAD}
    assert not worse, worse
    assert set(before) <= set(after), set(before) - set(after)  # no test vanished
