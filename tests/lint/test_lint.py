"""devcaps lint: what it flags and what it leaves alone, its output formats, exit codes and bad
input, suppression, hardware classification, and that our own code passes it.

Snippets with hardcoded device checks live in tests/data (lint_cases.txt, lint/*.py.txt), never
in .py files: the repository holds itself to the lint.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_devcaps.commands.main import main
from pytest_devcaps.lint import analyze, classify_file, lint_paths, lint_source

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
FIXTURES = DATA / "lint"


def _cases() -> list[tuple[list[str], str, str]]:
    """(expected codes, what, source) from lint_cases.txt: a ``### <codes> | <what>`` line opens each."""
    cases: list[tuple[list[str], str, list[str]]] = []
    for line in (DATA / "lint_cases.txt").read_text().splitlines():
        if line.startswith("### "):
            head, _, what = line[4:].partition(" | ")
            cases.append(([] if head.strip() == "-" else head.split(), what, []))
        elif cases:
            cases[-1][2].append(line)
    return [(codes, what, "\n".join(lines) + "\n") for codes, what, lines in cases]


@pytest.mark.parametrize(("codes", "what", "source"), _cases(), ids=[c[1] for c in _cases()])
def test_every_pattern_is_found_and_generic_code_is_not(codes: list[str], what: str, source: str) -> None:
    findings = lint_source(source, "t.py")
    assert [f.code for f in findings] == codes, "\n".join(map(str, findings))
    for finding in findings:
        assert str(finding).startswith(f"t.py:{finding.line}:{finding.column}: {finding.code} ")
        assert "(use: " in str(finding) and finding.use


def test_findings_are_sorted_by_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "b.py").write_text("x = t.cuda()\ntorch.cuda.synchronize()\n")
    (tmp_path / "a.py").write_text("torch.cuda.synchronize()\nx = t.cuda()\n")
    found = [(Path(f.path).name, f.line) for f in lint_paths([tmp_path])]
    assert found == [("a.py", 1), ("a.py", 2), ("b.py", 1), ("b.py", 2)]


def test_every_finding_says_whether_fix_handles_it() -> None:
    """A finding --fix leaves says why ("not fixed: ..."); one it fixes says how (bad input,
    DC000, is never fixed)."""
    for path in FIXTURES.glob("*.py.txt"):
        for finding in analyze(path.read_text(), path.name).findings:
            if finding.code == "DC000":
                assert not finding.fixable
                continue
            assert finding.fixable == ("; not fixed: " not in finding.message), finding
            assert finding.fix is None or finding.fix.strip(), finding


@pytest.mark.parametrize("fmt", ["text", "json", "github"])
def test_output_formats_are_stable(fmt: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "sample.py").write_text((FIXTURES / "formats.py.txt").read_text())
    monkeypatch.chdir(tmp_path)
    assert main(["lint", "sample.py", "--format", fmt]) == 1
    out = capsys.readouterr().out
    assert out == (FIXTURES / f"formats.{fmt}").read_text()
    if fmt == "json":
        data = json.loads(out)
        # the helper's .cuda() is fixable too: it becomes .to(device_type) of the module-level device_type
        assert data["summary"] == {"files": 1, "findings": 3, "fixable": 3}


def test_suppression_per_line_and_per_rule(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = FIXTURES / "suppressed.py.txt"
    findings = lint_source(source.read_text(), "s.py")
    assert [(f.line, f.code) for f in findings] == [(8, "DC002"), (10, "DC003"), (10, "DC000")]
    # DC03 is one edit from DC003 and from DC013: the closest valid code either way
    assert "did you mean 'DC003'" in findings[2].message or "did you mean 'DC013'" in findings[2].message
    bad = tmp_path / "s.py"
    bad.write_text(source.read_text())
    assert main(["lint", str(bad)]) == 2  # an unknown rule code in a pragma is bad input
    assert "DC000 unknown rule code 'DC03'" in capsys.readouterr().out


def test_exit_codes_and_exclude(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clean = tmp_path / "test_clean.py"
    clean.write_text("import torch\n\ndef test_x(device):\n    assert torch.ones(1, device=device).item() == 1\n")
    assert main(["lint", str(clean)]) == 0
    assert capsys.readouterr().out == "devcaps lint: 1 file checked, no hardcoded device checks\n"
    bad = tmp_path / "test_bad.py"
    bad.write_text("import torch\n\ndef test_x():\n    assert " + _cases()[0][2].splitlines()[1][3:-1] + "\n")
    assert main(["lint", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert f"{bad.as_posix()}:4:12: DC001" in captured.out
    assert "1 hardcoded device check(s) in 1 file(s)" in captured.err
    assert main(["lint", str(tmp_path), "--exclude", "test_bad.py"]) == 0


def test_walks_skip_virtualenvs_and_build_output(tmp_path: Path) -> None:
    for folder in (".venv/lib", "build", "node_modules/x", "pkg/.tox", "pkg"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / "m.py").write_text("torch.cuda.synchronize()\n")
    assert [Path(f.path).relative_to(tmp_path).as_posix() for f in lint_paths([tmp_path])] == ["pkg/m.py"]
    assert len(lint_paths([tmp_path / "build" / "m.py"])) == 1  # a file named is always read


def test_missing_path_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lint", "/nonexistent/tests"]) == 2
    assert capsys.readouterr().err == "devcaps: error: /nonexistent/tests: no such file or directory\n"


@pytest.mark.parametrize(("content", "why"), [
    (b"x = '\xff\xfe'\n", "cannot decode"),
    (b"def broken(:\n    pass\n", "cannot parse"),
    (b"x = 1\x00\n", "cannot parse"),
    (b"# -*- coding: no-such-codec -*-\nx = 1\n", "cannot decode"),
])
def test_unreadable_files_are_findings_not_tracebacks(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       content: bytes, why: str) -> None:
    bad = tmp_path / "bad.py"
    bad.write_bytes(content)
    (tmp_path / "good.py").write_text("x = t.cuda()\n")
    assert main(["lint", str(tmp_path)]) == 2
    out = capsys.readouterr().out
    assert f"{bad.as_posix()}:" in out and f"DC000 {why}" in out
    assert "good.py:1:7: DC002" in out  # the other files are still checked


@pytest.mark.parametrize(("name", "hardware"), [
    ("pytest_cuda", "accelerator"),
    ("float8_style", "nvidia"),       # an sm_100 gate has no capability yet
    # the sm_90 / sm_80-in-a-device-type-test gates it keeps (NVIDIA); @onlyCUDA becomes
    # @onlyAccelerator, and skipIfRocm / skipIf(TEST_WITH_ROCM) skip *on* ROCm (not "amd")
    ("inductor_style", "nvidia"),
    ("fsdp_style", "accelerator"),    # CUDA graphs: torch.accelerator.Graph (a person rewrites them)
    ("transformers_style", "accelerator"),
])
def test_hardware_classification(name: str, hardware: str) -> None:
    found = classify_file(analyze((FIXTURES / f"{name}.py.txt").read_text(), name).findings)
    assert found.hardware == hardware
    explaining = {"cuda": {"cuda", "nvidia", "amd"}}.get(hardware, {hardware})
    assert found.because and all(f.hardware in explaining for f in found.because)


@pytest.mark.parametrize(("source", "hardware"), [
    # skipped on ROCm: runs everywhere else, so no vendor class; run only on ROCm: amd
    ("@skipIfRocm\ndef test_a():\n    pass\n", "generic"),
    ("@unittest.skipIf(TEST_WITH_ROCM, 'no')\ndef test_a():\n    pass\n", "generic"),
    ("@unittest.skipIf(not TEST_WITH_ROCM, 'ROCm only')\ndef test_a():\n    pass\n", "amd"),
    ("torch.cuda.manual_seed(0)\ntorch.cuda.empty_cache()\n", "generic"),
    ("@pytest.mark.skipif(not is_MI300(), reason='x')\ndef test_a():\n    pass\n", "amd"),
    ("@pytest.mark.skipif(not IS_SM100, reason='x')\ndef test_a():\n    pass\n"
     "@pytest.mark.skipif(not is_MI300(), reason='x')\ndef test_b():\n    pass\n", "cuda"),
])
def test_hardware_vocabulary(source: str, hardware: str) -> None:
    assert classify_file(analyze(source, "t.py").findings).hardware == hardware


def test_every_suggested_class_is_one_the_hardware_marker_accepts() -> None:
    """The lint suggests classes in the marker's own vocabulary: pasting the suggestion works."""
    from typing import get_args

    from pytest_devcaps.marks.hardware import check_class
    from pytest_devcaps.lint.records import Hardware

    for hardware in get_args(Hardware):
        assert check_class(hardware) == hardware


def test_json_reports_hardware_per_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.py").write_text((FIXTURES / "float8_style.py.txt").read_text())
    (tmp_path / "b.py").write_text("torch.cuda.manual_seed(0)\n")
    assert main(["lint", str(tmp_path), "--format", "json"]) == 1
    files = {Path(f["path"]).name: f for f in json.loads(capsys.readouterr().out)["files"]}
    assert files["a.py"]["hardware"] == "nvidia" and "NVIDIA" in files["a.py"]["hardware_reason"]
    assert files["b.py"]["hardware"] == "generic"


def test_our_own_code_passes_the_lint(capsys: pytest.CaptureFixture[str]) -> None:
    paths = [str(ROOT / name) for name in ("pytest_devcaps", "kernels", "tests", "benchmarks")]
    status = main(["lint", *paths, "--exclude", "*/pytest_devcaps/backends/*"])
    assert status == 0, capsys.readouterr().out
