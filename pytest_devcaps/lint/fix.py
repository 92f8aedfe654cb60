"""``--fix`` and ``--diff``: rewrite a file until the lint has nothing more to fix (a rewrite can
uncover one more, e.g. a constant whose last use went), refusing any result that does not parse.
The file's findings after the rewrite are the ones ``--fix`` said it would leave."""

from __future__ import annotations

import ast
import difflib
from dataclasses import dataclass

from pytest_devcaps.errors import DevcapsError
from pytest_devcaps.lint.analyze import analyze
from pytest_devcaps.lint.codemod import apply_edits
from pytest_devcaps.lint.records import Analysis

MAX_ROUNDS = 4


class FixError(DevcapsError):
    """A rewrite that would not parse: nothing is written."""


@dataclass(frozen=True)
class FixResult:
    path: str
    before: str
    after: str
    fixed: int
    left: Analysis

    @property
    def changed(self) -> bool:
        return self.before != self.after

    def diff(self) -> str:
        old, new = (self.path, self.path) if self.path.startswith("/") else (f"a/{self.path}", f"b/{self.path}")
        lines = difflib.unified_diff(self.before.splitlines(keepends=True), self.after.splitlines(keepends=True),
                                     old, new)
        return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def fix_text(text: str, path: str = "<string>") -> FixResult:
    """The rewritten text and what is left; raises FixError rather than return broken code."""
    first = analyze(text, path)
    current = text
    for _ in range(MAX_ROUNDS):
        analysis = first if current is text else analyze(current, path)
        if not analysis.readable or not analysis.edits:
            break
        new = apply_edits(current, analysis.edits)
        try:
            ast.parse(new, filename=path)
        except SyntaxError as exc:
            raise FixError(f"{path}: the rewrite would not parse ({exc.msg}, line {exc.lineno}); "
                           "nothing written. Please report this with the file.") from None
        if new == current:
            break
        current = new
    left = first if current is text else analyze(current, path)
    return FixResult(path, text, current, sum(f.fixable for f in first.findings), left)
