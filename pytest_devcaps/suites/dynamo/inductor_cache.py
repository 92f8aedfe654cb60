"""Where the suite's Inductor compiles are cached.

By default one persistent cache per torch version under the devcaps cache directory
(``$PYTEST_DEVCAPS_CACHE_DIR``, else ``$XDG_CACHE_HOME/pytest-devcaps``):
``<cache dir>/inductor/torch-<version>``. A second run then finds its kernels compiled (the
suite ran in 11 s instead of 21 s on a 2-core CPU machine), and pytest-xdist workers and
concurrent runs share it (Inductor's cache is written with file locks and atomic renames).
``PYTEST_DEVCAPS_DYNAMO_CACHE=fresh`` gives each run a new, empty directory instead, when isolation is
the point (a first-compile bug); ``shared`` (or unset) is the default. A ``TORCHINDUCTOR_CACHE_DIR``
the user set is kept in the shared mode. The old name ``DEVCAPS_DYNAMO_CACHE`` still works, with a
deprecation warning.

Inductor loads compiled code from its cache, so a shared directory is used only when it is the
current user's and nobody else may write to it (created with mode 0700).
"""

from __future__ import annotations

import re
import stat
from pathlib import Path
from typing import Mapping

from pytest_devcaps.errors import ConfigError
from pytest_devcaps._util.environ import ENV_DYNAMO_CACHE, lookup
from pytest_devcaps._util.files import untrusted

#: The earlier name of the constant (the table in ``_util.environ`` is the source).
CACHE_VARIABLE = ENV_DYNAMO_CACHE
INDUCTOR_VARIABLE = "TORCHINDUCTOR_CACHE_DIR"
MODES = ("shared", "fresh")


def cache_mode(value: str, variable: str = ENV_DYNAMO_CACHE) -> str:
    """``shared`` (also for unset/empty) or ``fresh``; ConfigError naming ``variable`` (the name
    the value was set under) otherwise."""
    text = value.strip().lower() or "shared"
    if text not in MODES:
        raise ConfigError(f"{variable}={value!r}: expected 'shared' (the default: one "
                         "persistent cache per torch version) or 'fresh' (a new one per run)")
    return text


def shared_cache_dir(devcaps_cache_dir: Path, torch_version: str) -> Path:
    """``<devcaps cache dir>/inductor/torch-<version>`` (characters unsafe in a path replaced)."""
    return devcaps_cache_dir / "inductor" / f"torch-{re.sub(r'[^A-Za-z0-9._+-]', '_', torch_version)}"


def prepare_shared(path: Path) -> Path:
    """Create ``path`` (mode 0700) and check that it is safe to load compiled code from:
    a directory owned by this user that neither group nor others may write. ConfigError says
    why not and what to do."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    info = path.lstat()
    problem = "is not a directory" if not stat.S_ISDIR(info.st_mode) else None
    if problem is None and (trust := untrusted(info)) is not None:
        problem = f"is {trust}"
    if problem:
        raise ConfigError(f"the shared Inductor cache {path} {problem}; Inductor would load "
                         f"compiled code from it. Fix the directory, or run with "
                         f"{ENV_DYNAMO_CACHE}=fresh")
    return path


def choose_cache_dir(environ: Mapping[str, str], run_dir: Path, devcaps_cache_dir: Path,
                     torch_version: str) -> Path:
    """The directory for ``TORCHINDUCTOR_CACHE_DIR``: ``run_dir/inductor-cache`` when fresh,
    else the user's ``TORCHINDUCTOR_CACHE_DIR``, else the shared one (created and checked).
    ConfigError for a bad mode or an unsafe shared directory."""
    found = lookup(ENV_DYNAMO_CACHE, environ)
    if found is not None and cache_mode(found.value, found.variable) == "fresh":
        cache = run_dir / "inductor-cache"
        cache.mkdir(parents=True, exist_ok=True)
        return cache
    if environ.get(INDUCTOR_VARIABLE):
        return Path(environ[INDUCTOR_VARIABLE])
    return prepare_shared(shared_cache_dir(devcaps_cache_dir, torch_version))
