"""Fixtures a test file gets from its ``conftest.py`` files: which of them are CUDA-only.

A gate in front of a test that requests such a fixture stays (``analyze``'s
``external_fixtures``): rewriting it would run the fixture's CUDA code on every device. A
conftest is judged by its text as it is (``--fix`` of one file never rewrites the conftest):
a fixture whose code (or a fixture or helper it reaches in the same conftest) has a finding
that fails off CUDA is CUDA-only, fixable or not; fix the conftest first, then the tests.
"""

from __future__ import annotations

import functools
from pathlib import Path

from pytest_devcaps.lint.regions import RegionIndex, within_any
from pytest_devcaps.lint.rules import RULES
from pytest_devcaps.lint.source import Point, SourceFile, parse_source, read_text

ROOT_MARKERS = ("pyproject.toml", "setup.cfg", "setup.py", "tox.ini", "pytest.ini", ".git")
MAX_LEVELS = 32


def conftest_paths(test_file: Path) -> list[Path]:
    """The ``conftest.py`` files pytest would load for ``test_file``, nearest first (up to the
    project root: the first folder with a pyproject.toml, setup.cfg, tox.ini, pytest.ini or .git)."""
    found: list[Path] = []
    folder, root = test_file.resolve().parent, project_root(test_file)
    for _ in range(MAX_LEVELS):
        candidate = folder / "conftest.py"
        if candidate.is_file() and candidate != test_file.resolve():
            found.append(candidate)
        if folder == root:
            break
        folder = folder.parent
    return found


def project_root(test_file: Path) -> Path:
    """The first folder up from ``test_file`` with a project marker (``ROOT_MARKERS``), or the
    filesystem root, or the folder ``MAX_LEVELS`` up."""
    folder = test_file.resolve().parent
    for _ in range(MAX_LEVELS):
        if any((folder / marker).exists() for marker in ROOT_MARKERS) or folder.parent == folder:
            return folder
        folder = folder.parent
    return folder


def cuda_only_fixtures(test_file: Path) -> dict[str, str]:
    """Fixture name -> why it is CUDA-only, from the conftests of ``test_file`` (nearest wins)."""
    result: dict[str, str] = {}
    for path in reversed(conftest_paths(test_file)):
        try:
            stamp = path.stat().st_mtime_ns
        except OSError:
            continue
        result.update(_judge(str(path), stamp))
    return result


@functools.lru_cache(maxsize=64)
def _judge(path: str, stamp: int) -> dict[str, str]:
    from pytest_devcaps.lint.analyze import analyze

    text = read_text(Path(path))
    if isinstance(text, tuple):
        return {}
    parsed = parse_source(text, path)
    if not isinstance(parsed, SourceFile):
        return {}
    bad = [f for f in analyze(text, path).findings if RULES.get(f.code) is not None and RULES[f.code].blocks_cpu]
    if not bad:
        return {}
    index = RegionIndex(parsed)
    verdicts: dict[str, str] = {}
    for name, fixture in index.fixtures.items():
        region = index.of_function(fixture)
        for finding in bad:
            spot = parsed.span(Point(finding.line, finding.column - 1))
            if within_any(spot, region):
                verdicts[name] = f"{Path(path).name}:{finding.line} {finding.code} ({finding.message.split(';')[0]})"
                break
    return verdicts
