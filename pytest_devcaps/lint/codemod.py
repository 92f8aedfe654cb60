"""``--fix`` needs LibCST, the optional ``lint`` extra: this module says so when it is missing
(:class:`MissingExtraError`, exit status 2) and otherwise hands the edits to ``transform``."""

from __future__ import annotations

from typing import Sequence

from pytest_devcaps.errors import DevcapsError
from pytest_devcaps.lint.records import Edit

EXTRA = "pytest-devcaps[lint]"


class MissingExtraError(DevcapsError):
    def __init__(self) -> None:
        super().__init__(f"--fix and --diff rewrite code with LibCST, which is not installed: "
                         f"pip install '{EXTRA}'")


def require_libcst() -> None:
    try:
        import libcst  # noqa: F401
    except ImportError:
        raise MissingExtraError() from None


def apply_edits(text: str, edits: Sequence[Edit]) -> str:
    """``text`` with ``edits`` applied and the imports the new code names added."""
    require_libcst()
    from pytest_devcaps.lint.transform import rewrite

    return rewrite(text, edits)
