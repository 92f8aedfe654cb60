"""``devcaps lint``: find the hardcoded device checks that keep a test suite on CUDA, and
(``--fix``, with the ``lint`` extra) rewrite what can be rewritten onto the plugin's fixtures,
marks and ``torch.accelerator``.

Modules, one job each (``docs/ARCHITECTURE.md`` says each one's job in a line):

- ``rules``       the rule table: patterns -> rule code, message, capability, replacement
- ``smlevels``    what an SM-level gate stands for, from the catalogue's nvidia rules
- ``records``     Span, Finding, Need, the edit kinds, Analysis
- ``source``      files in: paths, decoding, spans in characters, ``# devcaps: allow`` pragmas
- ``resolution``  what a name means: imports resolved by scope
- ``gating``      gate atoms in conditions, gates a file defines, the need of a condition
- ``scopes``      where code sits: pytest test, fixture, TestCase method, helper
- ``constructs``  skip decorators, in-test skips, ``pytestmark``: gates fixed as one
- ``aliases``     module-level device constants and their uses
- ``calls``       calls, moves, literals, settings inside code
- ``helpers``     which helper functions can be given a device parameter
- ``regions``     what a gate guards
- ``libraries``   calls into CUDA-only libraries: residue that keeps a gate
- ``conftests``   the CUDA-only fixtures a test file gets from its conftest.py files
- ``imported_uses`` where a test file runs the CUDA-only names it imports (residue)
- ``project_imports`` which names a test file imports from its project's modules are CUDA-only
- ``layout``      ``--target torch``: each test class's TEST_LINTER layout
- ``relayout``    writing those layouts with LibCST
- ``finder``      the syntax-tree walk that uses the modules above
- ``items``       working records and the decision for each gate
- ``analyze``     one file start to end, and its hardware classification
- ``output``      text / json / github formats
- ``fix``         ``--fix`` / ``--diff`` until nothing is left to fix
- ``importpass``  LibCST's import visitors over only the statements they change
- ``codemod``     applying edits with LibCST (the optional ``lint`` extra)
- ``transform``   the LibCST transformer that applies the edits
- ``writer``      the safe reader (every file) and the atomic writer (``--fix``)
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

from pytest_devcaps.lint.analyze import Classification, analyze, classify_file, unreadable
from pytest_devcaps.lint.conftests import cuda_only_fixtures
from pytest_devcaps.lint.project_imports import lazy_imports
from pytest_devcaps.lint.records import Analysis, Finding, Target
from pytest_devcaps.lint.source import LintInputError, iter_python_files, read_text

__all__ = ["Analysis", "Classification", "Finding", "LintInputError", "analyze", "analyze_paths",
           "classify_file", "iter_python_files", "lint_paths", "lint_source"]


def lint_source(source: str, path: str = "<string>") -> list[Finding]:
    """Findings in one file's source (suppressed ones left out), sorted by line and column."""
    return list(analyze(source, path).findings)


def analyze_path(path: Path, target: Target = "devcaps") -> Analysis:
    """One file, with the CUDA-only fixtures its conftest.py files give its tests and the CUDA-only
    names it imports from its project's modules."""
    text = read_text(path)
    if isinstance(text, tuple):
        return unreadable(path.as_posix(), *text)
    return analyze(text, path.as_posix(), target, external_fixtures=cuda_only_fixtures(path),
                   imported=lazy_imports(path))


def analyze_paths(paths: Iterable[str | Path], exclude: Sequence[str] = (),
                  target: Target = "devcaps") -> list[Analysis]:
    """Every Python file under ``paths``, sorted by path; LintInputError for a missing path."""
    files = sorted(set(iter_python_files(paths, exclude)), key=lambda p: p.as_posix())
    return [analyze_path(p, target) for p in files]


def lint_paths(paths: Iterable[str | Path], exclude: Sequence[str] = ()) -> list[Finding]:
    return [f for analysis in analyze_paths(paths, exclude) for f in analysis.findings]
