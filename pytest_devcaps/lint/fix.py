"""``--fix`` and ``--diff``: rewrite a file until the lint has nothing more to fix (a rewrite can
uncover one more, e.g. a constant whose last use went), refusing any result that does not parse.
The file's findings after the rewrite are the ones ``--fix`` said it would leave."""

from __future__ import annotations

import ast
import difflib
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Collection, Iterable, Mapping

from pytest_devcaps.errors import DevcapsError
from pytest_devcaps.lint.analyze import analyze
from pytest_devcaps.lint.codemod import apply_edits
from pytest_devcaps.lint.imported_uses import ImportedNames
from pytest_devcaps.lint.records import Analysis, Finding, Target

MAX_ROUNDS = 4


class FixError(DevcapsError):
    """A rewrite that would not parse: nothing is written."""


@dataclass(frozen=True)
class FileCounts:
    """The migration report of one file, by rule code: ``found`` before the rewrite, ``left``
    after it (the lint run again on the output), ``fixed`` = found - left; ``new`` counts
    findings the output has beyond what was found (a rewrite that made one: a bug to report),
    so found = fixed + left - new, and a gate kept as written is never "fixed"."""

    path: str
    found: dict[str, int]
    fixed: dict[str, int]
    left: dict[str, int]
    new: dict[str, int] = field(default_factory=dict)

    def text(self) -> str:
        def part(name: str, counts: dict[str, int]) -> str:
            codes = ", ".join(f"{code} {n}" for code, n in sorted(counts.items()))
            return f"{name} {sum(counts.values())}" + (f" ({codes})" if codes else "")
        extra = f"; {part('new', self.new)}" if self.new else ""
        return (f"{self.path}: {part('found', self.found)}; {part('fixed', self.fixed)}; "
                f"{part('left', self.left)}{extra}")

    def as_json(self) -> dict[str, object]:
        return {"path": self.path, "found": self.found, "fixed": self.fixed, "left": self.left, "new": self.new,
                "totals": {"found": sum(self.found.values()), "fixed": sum(self.fixed.values()),
                           "left": sum(self.left.values()), "new": sum(self.new.values())}}


def _by_code(findings: Iterable[Finding]) -> dict[str, int]:
    return dict(sorted(Counter(f.code for f in findings).items()))


def file_counts(path: str, found: Iterable[Finding], left: Iterable[Finding]) -> FileCounts:
    before, after = _by_code(found), _by_code(left)
    fixed = {code: n - after.get(code, 0) for code, n in before.items() if n > after.get(code, 0)}
    new = {code: n - before.get(code, 0) for code, n in after.items() if n > before.get(code, 0)}
    return FileCounts(path, before, fixed, after, new)


@dataclass(frozen=True)
class FixResult:
    path: str
    before: str
    after: str
    fixed: int
    left: Analysis
    found: Analysis | None = None  # the file before the rewrite

    def counts(self) -> FileCounts:
        """Found / fixed / left, by rule code (the migration report's line for this file)."""
        return file_counts(self.path, self.found.findings if self.found else (), self.left.findings)

    @property
    def changed(self) -> bool:
        return self.before != self.after

    def diff(self) -> str:
        old, new = (self.path, self.path) if self.path.startswith("/") else (f"a/{self.path}", f"b/{self.path}")
        lines = difflib.unified_diff(_patch_lines(self.before), _patch_lines(self.after), old, new)
        return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def _patch_lines(text: str) -> list[str]:
    """Lines as ``patch`` and ``git apply`` count them: ended by ``\n`` alone (``splitlines`` also
    breaks at a CR, a form feed or U+2028, and the patch would not apply)."""
    return _PATCH_LINE.findall(text)


_PATCH_LINE = re.compile(r"[^\n]*\n|[^\n]+\Z")


def _keep_final_cr(before: str, after: str) -> str:
    """LibCST drops a bare ``\r`` that ends a file (its round trip of ``x = 1\r`` is ``x = 1``):
    put it back, so the file's last line keeps its line end."""
    if before.endswith("\r") and not after.endswith("\r"):
        return after + "\r"
    return after


def fix_text(text: str, path: str = "<string>", target: Target = "devcaps",
             untouched: Collection[str] = (), *,
             external_fixtures: Mapping[str, str] | None = None,
             imported: Callable[[], ImportedNames] | None = None) -> FixResult:
    """The rewritten text and what is left; raises FixError rather than return broken code.
    ``untouched`` (functions left as they are, with the gates they depend on: ``--verify``
    undoing a rewrite), ``external_fixtures`` and ``imported`` as for :func:`~pytest_devcaps.lint.analyze.analyze`."""
    kept = frozenset(untouched)

    def read(source: str) -> Analysis:
        return analyze(source, path, target, untouched=kept, external_fixtures=external_fixtures,
                       imported=imported)

    first = read(text)
    current, analysis = text, first  # ``analysis`` is always the one of ``current``
    for _ in range(MAX_ROUNDS):
        if not analysis.readable or not analysis.edits:
            break
        try:
            new = _keep_final_cr(current, apply_edits(current, analysis.edits))
        except RecursionError:  # LibCST walks with less depth than the analysis did
            raise FixError(f"{path}: nested too deeply to rewrite (LibCST reached Python's recursion "
                           "limit); nothing written: split the long expression, or fix it by hand") from None
        try:
            ast.parse(new, filename=path)
        except SyntaxError as exc:
            raise FixError(f"{path}: the rewrite would not parse ({exc.msg}, line {exc.lineno}); "
                           "nothing written. Please report this with the file.") from None
        if new == current:
            break
        current, analysis = new, read(new)
    left = analysis
    if not left.readable:  # the rewrite reads as a DC000 (deeper than the walks go): keep the file
        raise FixError(f"{path}: {left.findings[0].message}; nothing written")
    counts = file_counts(path, first.findings, left.findings)
    return FixResult(path, text, current, sum(counts.fixed.values()), left, first)
