"""Reading what the lint checks: which files, their text, node spans in characters, and the
``# devcaps: allow[...]`` pragmas on each line.

A file that cannot be read, is not UTF-8 or is not Python is a ``DC000`` finding, never a
traceback; a path that does not exist is a :class:`LintInputError` (the command exits 2).
"""

from __future__ import annotations

import ast
import fnmatch
import io
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from pytest_devcaps.errors import DevcapsError, did_you_mean
from pytest_devcaps.lint.records import Span, Target
from pytest_devcaps.lint.rules import ALLOW_PRAGMA, RULES


class LintInputError(DevcapsError):
    """A path given to ``devcaps lint`` that does not exist (or a bad option value)."""


@dataclass(frozen=True)
class Pragma:
    """``# devcaps: allow`` (every rule) or ``# devcaps: allow[DC003,DC004]`` on one line."""

    codes: frozenset[str] | None
    column: int

    def allows(self, code: str) -> bool:
        return self.codes is None or code in self.codes


class SourceFile:
    """One parsed file: text, tree, per-line pragmas and byte-to-character column conversion."""

    def __init__(self, path: str, text: str, tree: ast.Module) -> None:
        self.path = path
        self.text = text
        self.tree = tree
        # lines as the tokenizer counts them: only \n, \r\n and \r end one (str.splitlines would
        # also split at a form feed or U+2028, and every line number after it would be off)
        self.lines_kept = source_lines(text)
        self.lines = [line.rstrip("\r\n") for line in self.lines_kept]
        self.pragmas: dict[int, Pragma] = {}
        self.bad_pragmas: list[tuple[int, int, str]] = []
        # the vocabulary --fix writes: "devcaps" (this plugin's decorators) or "torch" (torch only)
        self.target: Target = "devcaps"
        self._read_pragmas()

    def _read_pragmas(self) -> None:
        if "devcaps" not in self.text:
            return
        try:
            tokens = list(tokenize.generate_tokens(io.StringIO(self.text).readline))
        except (tokenize.TokenError, SyntaxError):  # pragma: no cover - ast.parse accepted it
            return
        for token in tokens:
            if token.type != tokenize.COMMENT:
                continue
            match = ALLOW_PRAGMA.search(token.string)
            if match is None:
                continue
            line, column = token.start
            codes = None
            if match.group(1) is not None:
                codes = frozenset(c.strip() for c in match.group(1).split(",") if c.strip())
                for code in sorted(codes - set(RULES)):
                    self.bad_pragmas.append((line, column + 1, f"unknown rule code {code!r} in "
                                             f"'# devcaps: allow[...]'{did_you_mean(code, RULES)}"))
            self.pragmas[line] = Pragma(codes, column)

    def char_col(self, line: int, byte_col: int) -> int:
        if not 0 < line <= len(self.lines):
            return byte_col
        text = self.lines[line - 1]
        if text.isascii():  # a byte is a character: no need to encode a long line per node
            return byte_col
        return len(text.encode("utf-8")[:byte_col].decode("utf-8", "replace"))

    def span(self, node: ast.AST) -> Span:
        line = getattr(node, "lineno", 1)
        end_line = getattr(node, "end_lineno", None) or line
        return Span(line, self.char_col(line, getattr(node, "col_offset", 0)),
                    end_line, self.char_col(end_line, getattr(node, "end_col_offset", None) or 0))

    def segment(self, node: ast.AST) -> str:
        """``ast.get_source_segment(self.text, node)`` from the lines split once (that function
        splits the whole file again on every call: quadratic over a file's nodes)."""
        try:
            line, end_line = node.lineno - 1, node.end_lineno  # type: ignore[attr-defined]
            start, end = node.col_offset, node.end_col_offset  # type: ignore[attr-defined]
        except AttributeError:
            return ""
        if end_line is None or end is None or not 0 <= line < end_line <= len(self.lines_kept):
            return ""
        end_line -= 1
        if line == end_line:
            return _cut(self.lines_kept[line], start, end)
        return "".join((_cut(self.lines_kept[line], start, None), *self.lines_kept[line + 1:end_line],
                        _cut(self.lines_kept[end_line], 0, end)))

    def allowed(self, line: int, code: str) -> bool:
        pragma = self.pragmas.get(line)
        return pragma is not None and pragma.allows(code)


def source_lines(text: str) -> list[str]:
    """``text``'s lines, line ends kept, split where Python's tokenizer ends a line (``\n``,
    ``\r\n``, ``\r``) and nowhere else (as ``ast``'s own ``_splitlines_no_ff``)."""
    return _LINE.findall(text)


_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def _cut(line: str, start: int, end: int | None) -> str:
    """Columns ``start:end`` of ``line``, counted in UTF-8 bytes as ``ast`` counts them."""
    if line.isascii():
        return line[start:end]
    return line.encode("utf-8")[start:end].decode("utf-8", "replace")


def parse_source(text: str, path: str) -> SourceFile | tuple[int, int, str]:
    """The parsed file, or (line, column, why) when it is not Python this interpreter reads."""
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as exc:
        return exc.lineno or 1, exc.offset or 1, f"cannot parse: {exc.msg}"
    except ValueError as exc:  # source code string cannot contain null bytes
        return 1, 1, f"cannot parse: {exc}"
    return SourceFile(path, text, tree)


def read_text(path: Path) -> str | tuple[int, int, str]:
    """A file's text, or (line, column, why) when it cannot be read as UTF-8 Python source."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        return 1, 1, f"cannot read: {exc.strerror or exc}"
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError) as exc:
        line = data[: getattr(exc, "start", 0)].count(b"\n") + 1 if isinstance(exc, UnicodeDecodeError) else 1
        return line, 1, f"cannot decode: {exc}"


# Folders a walk skips (as ruff and black do): hidden ones (.venv, .git, .tox) and these.
SKIPPED_DIRS = frozenset({"venv", "node_modules", "build", "dist", "__pycache__", "site-packages",
                          "__pypackages__", "_build"})


def _walk(root: Path) -> Iterator[Path]:
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts[:-1]
        if not any(p.startswith(".") or p in SKIPPED_DIRS for p in parts):
            yield path


def iter_python_files(paths: Iterable[str | Path], exclude: Sequence[str] = ()) -> Iterator[Path]:
    """Python files under ``paths`` (a file is taken as given; a walk skips virtualenvs, build
    output and hidden folders), minus ``exclude`` globs matched against the path or the file
    name; a path that does not exist raises LintInputError."""
    for root in paths:
        root = Path(root)
        if not root.exists():
            raise LintInputError(f"{root}: no such file or directory")
        candidates = [root] if root.is_file() else list(_walk(root))
        for path in candidates:
            text = path.as_posix()
            if any(fnmatch.fnmatch(text, pattern) or fnmatch.fnmatch(path.name, pattern) for pattern in exclude):
                continue
            yield path
