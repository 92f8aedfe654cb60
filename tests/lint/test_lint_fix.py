"""devcaps lint --fix / --diff (LibCST, the ``lint`` extra): the rewrite parses, keeps comments,
is idempotent, leaves exactly the findings it said it would, and the converted files collect and
run on this CPU machine (tests pass, or skip with a capability reason or a gate the lint still
reports)."""

from __future__ import annotations

import ast
import json
import re
import sys
from collections import Counter
from pathlib import Path

import pytest

from pytest_devcaps.commands.main import main
from pytest_devcaps.lint import analyze

pytest.importorskip("libcst", reason="--fix needs the lint extra (pytest-devcaps[lint])")
from pytest_devcaps.lint.fix import fix_text  # noqa: E402  (after the importorskip)

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "lint"
ALL = sorted(p.name.removesuffix(".py.txt") for p in FIXTURES.glob("*.py.txt") if ".fixed." not in p.name)
# Fixtures that import only torch and pytest, so the converted file runs here.
RUNNABLE = ["pytest_cuda", "float8_style", "transformers_style", "distributed_pytest", "module_gates"]


def _source(name: str) -> str:
    return (FIXTURES / f"{name}.py.txt").read_text()


def _what(message: str) -> str:
    """A finding's message without line numbers (a rewrite moves lines)."""
    return re.sub(r"line \d+", "line N", message)


@pytest.mark.parametrize("name", ALL)
def test_fix_parses_is_idempotent_and_leaves_what_it_said(name: str) -> None:
    before = analyze(_source(name), f"{name}.py")
    result = fix_text(_source(name), f"{name}.py")
    ast.parse(result.after)
    assert result.changed == any(f.fixable for f in before.findings)
    again = fix_text(result.after, f"{name}.py")
    assert not again.changed, again.diff()
    said_left = Counter((f.code, _what(f.message)) for f in before.findings if not f.fixable)
    left = Counter((f.code, _what(f.message)) for f in result.left.findings)
    assert left == said_left
    assert result.fixed == sum(f.fixable for f in before.findings)


def test_fix_output_of_the_pytest_module() -> None:
    """Every rewrite on one module, comments and formatting kept (the golden file is the
    reviewed output of --fix)."""
    result = fix_text(_source("pytest_cuda"), "pytest_cuda.py")
    assert result.after == (FIXTURES / "pytest_cuda.fixed.py.txt").read_text()
    assert "# the module constant" in result.after
    assert not result.left.findings


@pytest.mark.parametrize("name", RUNNABLE)
def test_converted_files_collect_and_run(name: str, pytester: pytest.Pytester) -> None:
    converted = fix_text(_source(name), f"test_{name}.py")
    path = pytester.makepyfile(**{f"test_{name}": converted.after})
    result = pytester.runpytest_subprocess(str(path), "-rs", "-p", "no:cacheprovider")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == 0 and outcomes.get("errors", 0) == 0, result.stdout.str()
    assert outcomes.get("passed", 0) > 0
    lines = converted.after.splitlines()
    reported = {f.line for f in converted.left.findings}
    for line, reason in re.findall(r"^SKIPPED \[\d+\] \S+:(\d+): (.*)$", result.stdout.str(), re.MULTILINE):
        by_capability = reason.startswith("requires ") or reason == "needs an accelerator"
        kept_gate = reported & {int(line) - 1, int(line), int(line) + 1} or any(
            reason in lines[n - 1] for n in reported)
        assert by_capability or kept_gate, (reason, converted.left.findings)


def test_fix_writes_files_and_diff_does_not(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "test_module.py"
    target.write_text(_source("distributed_pytest"))
    count = len(analyze(_source("distributed_pytest")).findings)
    assert count == 10 and all(f.fixable for f in analyze(_source("distributed_pytest")).findings)
    assert main(["lint", "--diff", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert captured.out.startswith(f"--- {target.as_posix()}\n+++ {target.as_posix()}\n")
    assert "+def test_rank_device(device):" in captured.out
    assert f"would fix {count} finding(s) in 1 file(s); 0 left" in captured.err
    assert target.read_text() == _source("distributed_pytest")
    assert main(["lint", "--fix", str(tmp_path)]) == 0
    assert f"fixed {count} finding(s) in 1 file(s); 0 left" in capsys.readouterr().err
    assert target.read_text() == fix_text(_source("distributed_pytest"), "x.py").after
    assert main(["lint", "--fix", str(tmp_path)]) == 0
    assert "fixed 0 finding(s) in 0 file(s); 0 left" in capsys.readouterr().err
    assert main(["lint", str(tmp_path)]) == 0


def test_fix_reports_what_it_left(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "test_fsdp.py"
    target.write_text(_source("fsdp_style"))
    assert main(["lint", "--fix", "--format", "json", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert '"fixable": false' in captured.out and '"fixable": true' not in captured.out
    # TestCase methods and helpers are converted too (torch.accelerator, the module's device_type,
    # the device module's _sleep under runtime.sleep, the stream itself as the context manager);
    # what is left: CUDA graphs (torch.accelerator.Graph captures another way: a person rewrites
    # them) and a pin_memory with no test to mark
    assert re.search(r"fixed 21 finding\(s\) in 1 file\(s\); 3 left", captured.err)
    migration = json.loads(captured.out)["migration"][0]
    assert migration["totals"] == {"found": 24, "fixed": 21, "left": 3, "new": 0}
    assert migration["left"] == {"DC004": 2, "DC012": 1}


def test_fix_never_writes_code_that_does_not_parse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    import pytest_devcaps.lint.fix as fix_module

    monkeypatch.setattr(fix_module, "apply_edits", lambda text, edits: text + "\ndef broken(:\n")
    target = tmp_path / "test_module.py"
    target.write_text(_source("pytest_cuda"))
    assert main(["lint", "--fix", str(tmp_path)]) == 2
    assert "the rewrite would not parse" in capsys.readouterr().err
    assert target.read_text() == _source("pytest_cuda")


def test_diff_takes_no_format(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lint", "--diff", "--format", "json", str(FIXTURES)]) == 2
    assert "--diff prints a patch" in capsys.readouterr().err


def test_without_libcst_fix_says_which_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "libcst", None)  # import libcst now raises ImportError
    target = tmp_path / "test_module.py"
    target.write_text(_source("pytest_cuda"))
    for flag in ("--fix", "--diff"):
        assert main(["lint", flag, str(tmp_path)]) == 2
        assert "pip install 'pytest-devcaps[lint]'" in capsys.readouterr().err
    assert target.read_text() == _source("pytest_cuda")
    assert main(["lint", str(tmp_path)]) == 1  # the lint itself needs no extra


def test_fix_and_diff_keep_a_files_declared_encoding(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """A latin-1 file (``# coding:`` line) is read for --diff / --fix as the check reads it, and
    written back in latin-1 (not a UnicodeDecodeError, not silently re-encoded as UTF-8)."""
    target = tmp_path / "test_latin1.py"
    head = "# -*- coding: latin-1 -*-\n# café\nimport torch\n\n"
    target.write_bytes((head + "def test_x():\n    t = torch.ones(2).cuda()\n").encode("latin-1"))
    assert main(["lint", "--diff", str(target)]) == 1
    assert "+    t = torch.ones(2).to(device)" in capsys.readouterr().out
    assert main(["lint", "--fix", str(target)]) == 0
    fixed = target.read_bytes()
    assert "# café".encode("latin-1") in fixed and b".to(device)" in fixed
    assert fixed.decode("latin-1").startswith(head)
