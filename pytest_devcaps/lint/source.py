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
from pytest_devcaps.lint.writer import read_source_text


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
            codes = read_pragma(token.string[match.end():])
            if isinstance(codes, str):  # malformed: refused, and it allows nothing
                self.bad_pragmas.append((line, column + 1, f"malformed '# devcaps: allow': {codes}"))
                continue
            for code in sorted((codes or frozenset()) - set(RULES)):
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


def read_pragma(rest: str) -> frozenset[str] | None | str:
    """What follows ``# devcaps: allow`` in a comment: None (every rule: nothing, or a space or
    punctuation before the comment goes on), the codes in ``[...]``, or why it is malformed
    (an unclosed ``[``, empty brackets, ``allowed``): a malformed pragma allows nothing, where
    reading it as a bare ``allow`` would silently allow every rule on its line."""
    if rest[:1].isalnum() or rest[:1] == "_":
        word = re.match(r"\w*", rest)
        return f"'allow{word.group() if word else ''}' is not 'allow'; write '# devcaps: allow' or " \
               "'# devcaps: allow[DC002,...]'"
    bracket = rest.lstrip(" \t")
    if not bracket.startswith("["):
        return None
    if "]" not in bracket:
        return "its '[' is never closed; write '# devcaps: allow[DC002,...]'"
    codes = frozenset(c.strip() for c in bracket[1:bracket.index("]")].split(",") if c.strip())
    return codes or "its brackets name no rule; write '# devcaps: allow' for every rule"


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
    except RecursionError:  # Python's parser gives up on a 20,000-term expression or a long chain
        return 1, 1, TOO_DEEP
    return SourceFile(path, text, tree)


#: Why a file nested deeper than Python's recursion limit is not checked (parsed or walked).
TOO_DEEP = ("cannot check: nested too deeply for Python's recursion limit (a very long expression or "
            "chain of calls); split it, or exclude the file")


def read_text(path: Path) -> str | tuple[int, int, str]:
    """A file's text, or (line, column, why) when it cannot be read as Python source: read
    through :mod:`~pytest_devcaps.lint.writer`'s safe reader, as ``--fix`` reads it (a regular
    file of at most 8 MiB; a FIFO, a device or a link to one is refused before a byte is read,
    never waited on; an encoding error names the codec, the byte and its line)."""
    return read_source_text(path)


# Folders a walk skips (as ruff and black do): hidden ones (.venv, .git, .tox) and these.
SKIPPED_DIRS = frozenset({"venv", "node_modules", "build", "dist", "__pycache__", "site-packages",
                          "__pypackages__", "_build"})


def _walk(root: Path) -> Iterator[Path]:
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts[:-1]
        if not any(p.startswith(".") or p in SKIPPED_DIRS for p in parts) and not path.is_dir():
            yield path  # a folder named like a file (``pkg.py/``) is walked, not read


def iter_python_files(paths: Iterable[str | Path], exclude: Sequence[str] = ()) -> Iterator[Path]:
    """Python files under ``paths`` (a file is taken as given; a walk skips virtualenvs, build
    output and hidden folders), minus ``exclude`` globs matched against the path or the file
    name; a path that does not exist raises LintInputError."""
    for root in paths:
        root = Path(root)
        if not root.exists():
            raise LintInputError(f"{root}: no such file or directory")
        # anything but a folder is taken as given: a FIFO or a device named on the command line
        # is refused by the reader (a DC000), never skipped as "no files"
        candidates = list(_walk(root)) if root.is_dir() else [root]
        for path in candidates:
            text = path.as_posix()
            if any(fnmatch.fnmatch(text, pattern) or fnmatch.fnmatch(path.name, pattern) for pattern in exclude):
                continue
            yield path


class Point(ast.AST):
    """A position as an ast node (``SourceFile.span`` reads lineno / col_offset)."""

    def __init__(self, line: int, column: int) -> None:
        super().__init__()
        self.lineno = self.end_lineno = line
        self.col_offset = self.end_col_offset = column
