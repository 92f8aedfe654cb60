"""Warnings while pytest configures: issued through pytest, not around it.

A plain ``warnings.warn`` from ``pytest_configure`` bypasses pytest's warning machinery: it is
printed before the header, and under ``-W error`` it escapes the hook as an INTERNALERROR.
Here such a warning is a :class:`DevcapsConfigWarning` (a ``pytest.PytestWarning``) issued with
``pytest.Config.issue_config_time_warning``, so it lands in the warnings summary and ``-W`` /
``filterwarnings`` apply; one that the filters turn into an error is a usage error naming it.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, Iterator, TextIO

import pytest

from pytest_devcaps.errors import DevcapsWarning


class DevcapsConfigWarning(DevcapsWarning, pytest.PytestWarning):
    """A pytest-devcaps warning issued while pytest configures (a backend skipped, ...).

    Filter it as ``pytest_devcaps.session.config_warnings.DevcapsConfigWarning``, as
    ``pytest_devcaps.errors.DevcapsWarning`` or as ``pytest.PytestWarning``.
    """


def issue(config: pytest.Config, message: str) -> None:
    """Issue ``message`` as a :class:`DevcapsConfigWarning`; a usage error if ``-W`` makes it one."""
    try:
        config.issue_config_time_warning(DevcapsConfigWarning(message), stacklevel=2)
    except DevcapsWarning:
        raise pytest.UsageError(f"{message} (a warning, made an error by -W or filterwarnings)") from None


@contextlib.contextmanager
def reissued(config: pytest.Config) -> Iterator[None]:
    """Run a block that may warn with :class:`DevcapsWarning` (backend discovery, ...): those
    are held back and issued through pytest afterwards; other warnings pass untouched."""
    ours: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("always", DevcapsWarning)
        shown = warnings.showwarning

        def hold(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 file: TextIO | None = None, line: str | None = None) -> Any:
            if issubclass(category, DevcapsWarning):
                ours.append(str(message))
                return None
            return shown(message, category, filename, lineno, file, line)

        warnings.showwarning = hold
        yield
    for message in ours:
        issue(config, message)
