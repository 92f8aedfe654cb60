"""``devcaps lint [PATH ...] [--exclude GLOB] [--format text|json|github] [--fix [--verify] | --diff]``.

Exit status: 0 nothing found (or everything fixed), 1 findings (left), 2 bad input: a path
that does not exist, a file that cannot be read or parsed (reported as ``DC000``), an unknown
rule code in a pragma, or ``--fix``/``--diff`` without LibCST (the ``lint`` extra).
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Sequence, TextIO

from pytest_devcaps.lint import analyze_paths
from pytest_devcaps.lint.fix import FileCounts, FixResult, file_counts
from pytest_devcaps.lint.records import Analysis, Target
from pytest_devcaps.lint.output import render, summary
from pytest_devcaps.lint.source import LintInputError

if TYPE_CHECKING:
    from pytest_devcaps.lint.writer import SourceSnapshot

EXIT_CLEAN, EXIT_FINDINGS, EXIT_BAD_INPUT = 0, 1, 2


def _status(analyses: Sequence[Analysis]) -> int:
    findings = [f for a in analyses for f in a.findings]
    if any(f.code == "DC000" for f in findings):
        return EXIT_BAD_INPUT
    return EXIT_FINDINGS if findings else EXIT_CLEAN


def run(paths: Sequence[str], exclude: Sequence[str], fmt: str = "text", mode: str = "check",
        out: TextIO | None = None, err: TextIO | None = None, target: Target = "devcaps",
        verify_timeout: float | None = None) -> int:
    """Run the lint; ``mode`` is ``check``, ``fix`` (write files), ``diff`` (print a patch) or
    ``fix-check`` (write nothing; exit 1 if --fix would change a file). ``verify_timeout`` (fix
    only): run each file's tests before and after, keep only the rewrites that hold
    (:mod:`pytest_devcaps.commands.verify`), at most that many seconds per file."""
    out = out or sys.stdout
    err = err or sys.stderr
    if mode == "diff" and fmt != "text":
        raise LintInputError("--diff prints a patch; --format applies to findings (drop one of them)")
    if verify_timeout is not None and mode != "fix":
        raise LintInputError("--verify goes with --fix (`devcaps lint --fix --verify`): it runs the tests "
                             "before writing what holds")
    if mode != "check":
        from pytest_devcaps.lint.codemod import require_libcst

        require_libcst()
    analyses = analyze_paths(paths, exclude, target)
    if mode == "check":
        out.write(render(analyses, fmt))
        if fmt == "text" and any(a.findings for a in analyses):
            err.write(summary(analyses) + "\n")
        elif fmt == "text":  # say it looked: a silent success reads like nothing was checked
            out.write(f"devcaps lint: {len(analyses)} file{'s' if len(analyses) != 1 else ''} "
                      "checked, no hardcoded device checks\n")
        return _status(analyses)
    return _rewrite(analyses, fmt, mode, out, err, target, [str(p) for p in paths], verify_timeout)


def _root(path: str, paths: Sequence[str]) -> str | None:
    """The command-line path ``path`` was found under: the tree --fix may write in."""
    for given in paths:
        if path == given or Path(path).is_relative_to(given):
            return given
    return None


def _fix_one(analysis: Analysis, target: Target, err: TextIO,
             root: str | None) -> tuple[FixResult, SourceSnapshot] | None:
    """The file rewritten, and the snapshot it was read from (None: it is left as it is:
    unreadable, nothing to fix, or a rewrite that would not parse, which is reported)."""
    from pytest_devcaps.lint.fix import FixError, fix_text
    from pytest_devcaps.lint.writer import LintWriteError, read_source

    if not analysis.readable or not any(f.fixable for f in analysis.findings):
        return None
    try:  # never blocks (a FIFO or device is refused), never reads through a link out of the tree
        snapshot = read_source(analysis.path, root=root)
        text = snapshot.text()  # decoded as the analysis read it (BOM, `# coding:`, CRLF kept)
    except LintWriteError as exc:
        err.write(f"devcaps: error: {exc}\n")
        return None
    from pytest_devcaps.lint.conftests import cuda_only_fixtures
    from pytest_devcaps.lint.project_imports import lazy_imports

    try:
        return fix_text(text, analysis.path, target, external_fixtures=cuda_only_fixtures(Path(analysis.path)),
                        imported=lazy_imports(Path(analysis.path))), snapshot
    except FixError as exc:
        err.write(f"devcaps: error: {exc}\n")
        return None


def _write(snapshot: SourceSnapshot, text: str, root: str | None, err: TextIO) -> bool:
    """Write through lint.writer (atomic; mode, owner, encoding, BOM and line endings kept;
    never over a file changed since it was read); False, reported, when it refused."""
    from pytest_devcaps.lint.writer import LintWriteError, write_source

    try:
        write_source(snapshot, text, root=root)
    except LintWriteError as exc:
        err.write(f"devcaps: error: {exc}\n")
        return False
    return True


def _verified(result: FixResult, target: Target, timeout: float, err: TextIO) -> FixResult | None:
    """``result`` as far as its tests hold (see commands.verify); None: leave the file as it was."""
    from pytest_devcaps.commands.verify import verify_file
    from pytest_devcaps.lint.analyze import analyze

    verdict = verify_file(Path(result.path), result.before, target, timeout)
    err.write(verdict.report())
    if verdict.text is None:
        return None
    left = result.left if verdict.text == result.after else \
        analyze(verdict.text, result.path, target, untouched=frozenset(verdict.untouched))
    found = len(result.found.findings) if result.found else 0
    return FixResult(result.path, result.before, verdict.text, max(found - len(left.findings), 0), left, result.found)


def _verified_counts(result: FixResult) -> FileCounts:
    """Found / fixed / left of a verified file: fixed is what the written text no longer has."""
    found = Counter(f.code for f in (result.found.findings if result.found else ()))
    left = Counter(f.code for f in result.left.findings)
    fixed = {code: n - left[code] for code, n in found.items() if n > left[code]}
    return FileCounts(result.path, dict(sorted(found.items())), dict(sorted(fixed.items())), dict(sorted(left.items())))


def _rewrite(analyses: list[Analysis], fmt: str, mode: str, out: TextIO, err: TextIO, target: Target,
             paths: Sequence[str] = (), verify_timeout: float | None = None) -> int:
    left: list[Analysis] = []
    counts: list[FileCounts] = []
    fixed = files = 0
    failed = False
    for analysis in analyses:
        root = _root(analysis.path, paths)
        done = _fix_one(analysis, target, err, root)
        if done is not None and done[0].changed and verify_timeout is not None:
            verified = _verified(done[0], target, verify_timeout, err)
            done = (verified, done[1]) if verified is not None else None
            if done is None:  # every rewrite undone: the file stays as it is, and that is no failure
                left.append(analysis)
                counts.append(file_counts(analysis.path, analysis.findings, analysis.findings))
                continue
        result = done[0] if done is not None else None
        if done is not None and done[0].changed and mode == "fix" and not _write(done[1], done[0].after, root, err):
            result = None  # refused (changed meanwhile, a link out of the tree...): the file is as it was
        failed = failed or (result is None and analysis.readable and any(f.fixable for f in analysis.findings))
        left.append(result.left if result is not None else analysis)
        if result is not None and verify_timeout is not None:
            counts.append(_verified_counts(result))
        else:
            counts.append(result.counts() if result is not None else file_counts(analysis.path, analysis.findings,
                                                                                 analysis.findings))
        if result is None or not result.changed:
            continue
        fixed, files = fixed + result.fixed, files + 1
        if mode == "diff":
            out.write(result.diff())
    counts = [c for c in counts if c.found]
    if target == "torch" and counts:
        from pytest_devcaps.lint import layout

        if not layout.available():
            err.write(f"devcaps lint: test classes were not classified: the installed torch "
                      f"({layout.installed_torch()}) has no HardwareClassification, which PyTorch's TEST_LINTER "
                      "form needs (torch 2.14+); run --target torch again with it installed\n")
    remaining = [a for a in left if a.findings]
    verb = {"diff": "would fix", "fix-check": "would fix"}.get(mode, "fixed")
    if fmt == "json" and mode != "diff":
        out.write(render(left, fmt, migration=[c.as_json() for c in counts]))
    elif mode != "diff":
        out.write(render(left, fmt))
    elif remaining:
        err.write(render(left, "text"))
    if fmt == "text":
        err.write("".join(c.text() + "\n" for c in counts))
    total = sum(len(a.findings) for a in remaining)
    err.write(f"devcaps lint: {verb} {fixed} finding(s) in {files} file(s); {total} left\n")
    status = EXIT_BAD_INPUT if failed else _status(left)
    would_change = mode in ("diff", "fix-check") and files
    if mode == "fix-check" and status != EXIT_BAD_INPUT:
        # CI's question is "is --fix done here?": findings --fix leaves (printed above) do not fail it
        return EXIT_FINDINGS if would_change else EXIT_CLEAN
    return EXIT_FINDINGS if would_change and status == EXIT_CLEAN else status
