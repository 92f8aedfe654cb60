"""``devcaps lint [PATH ...] [--exclude GLOB] [--format text|json|github] [--fix | --diff]``.

Exit status: 0 nothing found (or everything fixed), 1 findings (left), 2 bad input: a path
that does not exist, a file that cannot be read or parsed (reported as ``DC000``), an unknown
rule code in a pragma, or ``--fix``/``--diff`` without LibCST (the ``lint`` extra).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence, TextIO

from pytest_devcaps.lint import analyze_paths
from pytest_devcaps.lint.records import Analysis
from pytest_devcaps.lint.output import render, summary
from pytest_devcaps.lint.source import LintInputError

EXIT_CLEAN, EXIT_FINDINGS, EXIT_BAD_INPUT = 0, 1, 2


def _status(analyses: Sequence[Analysis]) -> int:
    findings = [f for a in analyses for f in a.findings]
    if any(f.code == "DC000" for f in findings):
        return EXIT_BAD_INPUT
    return EXIT_FINDINGS if findings else EXIT_CLEAN


def run(paths: Sequence[str], exclude: Sequence[str], fmt: str = "text", mode: str = "check",
        out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run the lint; ``mode`` is ``check``, ``fix`` (write files) or ``diff`` (print a patch)."""
    out = out or sys.stdout
    err = err or sys.stderr
    if mode == "diff" and fmt != "text":
        raise LintInputError("--diff prints a patch; --format applies to findings (drop one of them)")
    if mode != "check":
        from pytest_devcaps.lint.codemod import require_libcst

        require_libcst()
    analyses = analyze_paths(paths, exclude)
    if mode == "check":
        out.write(render(analyses, fmt))
        if fmt == "text" and any(a.findings for a in analyses):
            err.write(summary(analyses) + "\n")
        elif fmt == "text":  # say it looked: a silent success reads like nothing was checked
            out.write(f"devcaps lint: {len(analyses)} file{'s' if len(analyses) != 1 else ''} "
                      "checked, no hardcoded device checks\n")
        return _status(analyses)
    return _rewrite(analyses, fmt, mode, out, err)


def _rewrite(analyses: list[Analysis], fmt: str, mode: str, out: TextIO, err: TextIO) -> int:
    from pytest_devcaps.lint.fix import FixError, fix_text
    from pytest_devcaps.lint.source import read_text, source_encoding

    left: list[Analysis] = []
    fixed = files = 0
    failed = False
    for analysis in analyses:
        if not analysis.readable or not any(f.fixable for f in analysis.findings):
            left.append(analysis)
            continue
        path = Path(analysis.path)
        text = read_text(path)  # decoded as the analysis read it (a `# coding:` line honoured)
        if not isinstance(text, str):
            left.append(analysis)
            continue
        try:
            result = fix_text(text, analysis.path)
        except FixError as exc:
            err.write(f"devcaps: error: {exc}\n")
            left.append(analysis)
            failed = True
            continue
        left.append(result.left)
        if not result.changed:
            continue
        fixed, files = fixed + result.fixed, files + 1
        if mode == "diff":
            out.write(result.diff())
        else:
            with open(path, "w", encoding=source_encoding(path), newline="") as handle:
                handle.write(result.after)
    remaining = [a for a in left if a.findings]
    verb = "would fix" if mode == "diff" else "fixed"
    if mode == "fix":
        out.write(render(left, fmt))
    elif remaining:
        err.write(render(left, "text"))
    total = sum(len(a.findings) for a in remaining)
    err.write(f"devcaps lint: {verb} {fixed} finding(s) in {files} file(s); {total} left\n")
    status = EXIT_BAD_INPUT if failed else _status(left)
    return EXIT_FINDINGS if mode == "diff" and files and status == EXIT_CLEAN else status
