"""Environment variables of pytest-devcaps: one prefix, ``PYTEST_DEVCAPS_*``, and the old names.

Every variable devcaps reads is ``PYTEST_DEVCAPS_<NAME>``. Some were first spelled without
``PYTEST_`` (``DEVCAPS_DIST_TIMEOUT``, ``DEVCAPS_DYNAMO_CACHE``...): the old name still works
and gives a :class:`~pytest_devcaps.errors.DevcapsDeprecationWarning` naming the new one; both
set to different values is a :class:`~pytest_devcaps.errors.ConfigError` naming both (which one
would win is not something a user should have to guess). Standard library and errors only.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Mapping

from pytest_devcaps.errors import ConfigError, DevcapsDeprecationWarning

PREFIX = "PYTEST_DEVCAPS_"

#: New name -> the old name it replaces (still read, with a deprecation warning).
RENAMED: Mapping[str, str] = {
    "PYTEST_DEVCAPS_DIST_TIMEOUT": "DEVCAPS_DIST_TIMEOUT",
    "PYTEST_DEVCAPS_DIST_PG_TIMEOUT": "DEVCAPS_DIST_PG_TIMEOUT",
    "PYTEST_DEVCAPS_DIST_SHARE_DEVICES": "DEVCAPS_DIST_SHARE_DEVICES",
    "PYTEST_DEVCAPS_DIST_REUSE": "DEVCAPS_DIST_REUSE",
    "PYTEST_DEVCAPS_DYNAMO_ORDER": "DEVCAPS_DYNAMO_ORDER",
    "PYTEST_DEVCAPS_DYNAMO_CACHE": "DEVCAPS_DYNAMO_CACHE",
}


@dataclass(frozen=True)
class EnvValue:
    """A variable's value and the name it was found under (the old name, when that was set)."""

    value: str
    variable: str


def lookup(name: str, environ: Mapping[str, str] | None = None) -> EnvValue | None:
    """``name`` (a ``PYTEST_DEVCAPS_*`` variable) from ``environ`` (default ``os.environ``), or
    its old name with a deprecation warning; None when neither is set. Both set to different
    values: :class:`ConfigError` naming both."""
    env = os.environ if environ is None else environ
    old = RENAMED.get(name)
    if old is None or old not in env:
        return EnvValue(env[name], name) if name in env else None
    if name in env:
        if env[name] != env[old]:
            raise ConfigError(f"{name}={env[name]!r} and its old name {old}={env[old]!r} are both "
                              f"set and differ; unset {old}", file=name)
        return EnvValue(env[name], name)
    warnings.warn(DevcapsDeprecationWarning(
        f"{old} is deprecated; set {name} instead (one prefix, PYTEST_DEVCAPS_, for every "
        "pytest-devcaps variable)"), stacklevel=2)
    return EnvValue(env[old], old)


def get(name: str, default: str = "", environ: Mapping[str, str] | None = None) -> str:
    """The value of ``name`` (or its old name, see :func:`lookup`), else ``default``."""
    found = lookup(name, environ)
    return default if found is None else found.value
