"""What the lint's rewrite tests share: ``--fix`` run on a dedented source, what it leaves."""

from __future__ import annotations

import textwrap

from pytest_devcaps.lint.fix import fix_text


def fix(source: str, target: str = "devcaps") -> str:
    return fix_text(textwrap.dedent(source), "test_t.py", target).after  # type: ignore[arg-type]


def left(source: str, target: str = "devcaps") -> list[str]:
    """The findings --fix leaves, as "CODE message"."""
    result = fix_text(textwrap.dedent(source), "test_t.py", target)  # type: ignore[arg-type]
    return [f"{f.code} {f.message}" for f in result.left.findings]


def unchanged(source: str, target: str = "devcaps") -> bool:
    return fix(source, target) == textwrap.dedent(source)
