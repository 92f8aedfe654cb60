"""devcaps lint: what it flags, what it leaves alone, and that our own code passes it."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_devcaps.cli import main
from pytest_devcaps.lint import lint_source

ROOT = Path(__file__).resolve().parents[1]


def _flagged_cases() -> list[tuple[str, str]]:
    """(source, code) pairs from tests/data/lint_cases.txt: a ``### CODE`` line opens each case."""
    cases: list[tuple[str, list[str]]] = []
    for line in (ROOT / "tests" / "data" / "lint_cases.txt").read_text().splitlines():
        if line.startswith("### "):
            cases.append((line[4:].strip(), []))
        elif cases:
            cases[-1][1].append(line)
    return [("\n".join(lines) + "\n", code) for code, lines in cases]


@pytest.mark.parametrize(("source", "code"), _flagged_cases(), ids=lambda v: v if v.startswith("DC") else "")
def test_flags_hardcoded_device_checks(source: str, code: str) -> None:
    findings = lint_source(source, "t.py")
    assert [f.code for f in findings] == [code]
    assert str(findings[0]).startswith("t.py:")


@pytest.mark.parametrize(
    "source",
    [
        "torch.ones(2, device=device)\n",
        "s = " + repr(_flagged_cases()[0][0]) + "  # a string, not a call\n",
        "torch.accelerator.synchronize()\n",
        "x.to(device)\n",
        "x.to(device, non_blocking=True)\n",
        _flagged_cases()[0][0].splitlines()[1] + "  # devcaps: allow\n    pass\n",
    ],
)
def test_leaves_device_generic_code_alone(source: str) -> None:
    assert lint_source(source, "t.py") == []


def test_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "test_bad.py"
    bad.write_text("import torch\n\ndef test_x():\n    assert " + _flagged_cases()[0][0].splitlines()[1][3:-1] + "\n")
    assert main(["lint", str(tmp_path)]) == 1
    assert f"{bad.as_posix()}:4:12: DC001" in capsys.readouterr().out
    assert main(["lint", str(tmp_path), "--exclude", "test_bad.py"]) == 0


def test_our_own_code_passes_the_lint(capsys: pytest.CaptureFixture[str]) -> None:
    paths = [str(ROOT / name) for name in ("pytest_devcaps", "kernels", "tests", "benchmarks")]
    status = main(["lint", *paths, "--exclude", "*/pytest_devcaps/backends/*"])
    assert status == 0, capsys.readouterr().out
