"""Building the emu extension once per torch version and source, into the devcaps cache.

The library lands in ``<cache>/emu/torch-<version>-<python tag>-<source digest>/`` (the cache
is ``pytest_devcaps._util.files.default_cache_dir()``; ``PYTEST_DEVCAPS_EMU_CACHE_DIR`` replaces
``<cache>/emu``), so a warm run finds it and loads it with
ctypes, without importing ``torch.utils.cpp_extension``. A cold build runs
``torch.utils.cpp_extension.load`` in a child interpreter with ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``
(the build must not load the backend it is building, and torch's autoload runs while
``import torch`` is still under way in the parent). Concurrent builds (xdist workers starting
together) wait on cpp_extension's own lock file in the build folder. A library is loaded only
when this user owns it and its folder and nobody else can write them (``files.untrusted``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TextIO

from pytest_devcaps._util.environ import ENV_CACHE_DIR, ENV_EMU_CACHE_DIR
from pytest_devcaps.errors import DevcapsError

#: Where builds go when set (tests keep one build while each session gets fresh probe caches).
#: The earlier name of the constant (the table in ``_util.environ`` is the source).
CACHE_ENV = ENV_EMU_CACHE_DIR
#: The extension's name: the library is ``<build folder>/devcaps_emu.so``.
EXTENSION = "devcaps_emu"
SOURCES = tuple(Path(__file__).resolve().parent / "csrc" / name
                for name in ("emu.cpp", "emu_runtime.cpp", "emu_autocast.cpp", "emu_c10d.cpp"))
#: Included by the sources: part of the digest, not compiled on their own.
HEADERS = tuple(Path(__file__).resolve().parent / "csrc" / name for name in ("emu_device.h",))
#: Compiler flags; part of the cache key.
CFLAGS = ("-O1",)
#: A cold build on a loaded two-core machine takes about a minute; past this it has hung.
BUILD_TIMEOUT_S = 900.0


class EmuBuildError(DevcapsError):
    """The emu extension cannot be built or loaded here (no compiler, a failed build...)."""


def source_digest() -> str:
    """A digest of the C++ sources and the flags they are compiled with."""
    digest = hashlib.sha256()
    for source in (*SOURCES, *HEADERS):
        digest.update(source.read_bytes())
    digest.update(repr(CFLAGS).encode())
    return digest.hexdigest()[:16]


def build_root() -> Path:
    """``$PYTEST_DEVCAPS_EMU_CACHE_DIR``, else ``emu/`` in the devcaps cache."""
    from pytest_devcaps._util.files import default_cache_dir

    explicit = os.environ.get(ENV_EMU_CACHE_DIR, "").strip()
    return Path(explicit) if explicit else default_cache_dir() / "emu"


def build_directory(torch_version: str) -> Path:
    tag = f"torch-{torch_version}-{sys.implementation.cache_tag}-{source_digest()}"
    return build_root() / tag.replace("+", "_")


def library_path(torch_version: str) -> Path:
    return build_directory(torch_version) / f"{EXTENSION}.so"


def toolchain_problem() -> str | None:
    """Why this machine cannot build the extension (None: it can): torch.utils.cpp_extension
    compiles with ``$CXX`` (else ``c++``) driven by ninja."""
    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None:
        return f"no C++ compiler: {compiler!r} is not on PATH (set CXX or install g++)"
    if shutil.which("ninja") is None:
        return "no ninja on PATH (torch.utils.cpp_extension builds with it: pip install ninja)"
    return None


def trusted_library(path: Path) -> Path | None:
    """``path`` when it is a built library this process may load; None when it is not built;
    raises :class:`EmuBuildError` when it exists but someone else could have written it."""
    from pytest_devcaps._util.files import untrusted

    if not path.is_file():
        return None
    for item in (path, path.parent):
        problem = untrusted(item.stat())
        if problem is not None:
            raise EmuBuildError(f"refusing to load {path}: {item} is {problem}; remove it or "
                                f"set {ENV_CACHE_DIR} to a folder of your own")
    return path


def ensure_built(torch_version: str, log: TextIO | None = None) -> tuple[Path, float | None]:
    """The library for this torch, built first when missing: (path, seconds the build took, or
    None when it was already built). Progress goes to ``log`` (default stderr)."""
    path = library_path(torch_version)
    if trusted_library(path) is not None:
        return path, None
    log = log if log is not None else sys.stderr
    problem = toolchain_problem()
    if problem is not None:
        raise EmuBuildError(f"cannot build the emu backend: {problem}")
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    print(f"devcaps emu: building the emulated device extension for torch {torch_version} "
          f"into {path.parent} (once; about a minute)...", file=log, flush=True)
    started = time.monotonic()
    _compile_in_child(path.parent, log)
    took = time.monotonic() - started
    if trusted_library(path) is None:
        raise EmuBuildError(f"the emu build finished but left no {path.name} in {path.parent}")
    print(f"devcaps emu: built {path} in {took:.1f} s", file=log, flush=True)
    return path, took


def _compile_in_child(directory: Path, log: TextIO) -> None:
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    command = [sys.executable, "-c", "import sys; from pytest_devcaps.emu.extension import compile_"
               "library; compile_library(sys.argv[1])", str(directory)]
    with tempfile.TemporaryFile("w+", encoding="utf-8") as output:
        child = subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT, text=True)
        code = _wait_with_progress(child, log, directory)
        output.seek(0)
        text = output.read()
    if code != 0:
        tail = "\n".join(text.strip().splitlines()[-25:])
        raise EmuBuildError(f"the emu build failed (exit code {code}):\n{tail}")


PROGRESS_EVERY_S = 15.0
"""How often a build in progress says so (the compile step is silent otherwise)."""


def _wait_with_progress(child: subprocess.Popen[str], log: TextIO, directory: Path) -> int:
    """The child's exit code; meanwhile a line on ``log`` every :data:`PROGRESS_EVERY_S` with
    the compile step's elapsed time. Past :data:`BUILD_TIMEOUT_S` the child is killed."""
    started = time.monotonic()
    while True:
        try:
            return child.wait(timeout=PROGRESS_EVERY_S)
        except subprocess.TimeoutExpired:
            elapsed = time.monotonic() - started
            if elapsed >= BUILD_TIMEOUT_S:
                child.kill()
                child.wait()
                raise EmuBuildError(f"the emu build did not finish in {BUILD_TIMEOUT_S:.0f} s "
                                    f"(folder {directory})") from None
            print(f"devcaps emu: compiling {', '.join(s.name for s in SOURCES)} "
                  f"(ninja, g++): {elapsed:.0f} s so far", file=log, flush=True)


def compile_library(directory: str) -> None:
    """Run in the child: compile with ``torch.utils.cpp_extension.load`` (ninja, cached
    objects, a lock file against concurrent builds). It loads the library it built, which in
    this throwaway interpreter is harmless."""
    from torch.utils import cpp_extension

    cpp_extension.load(name=EXTENSION, sources=[str(source) for source in SOURCES], build_directory=directory,
                       extra_cflags=list(CFLAGS), is_python_module=False, verbose=False)
