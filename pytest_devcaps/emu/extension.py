"""Building the emu extension once per torch version and source, into the devcaps cache.

The library lands in ``<cache>/emu/torch-<version>-<python tag>-<source digest>/`` (the cache
is ``pytest_devcaps._util.files.default_cache_dir()``; ``PYTEST_DEVCAPS_EMU_CACHE_DIR`` replaces
``<cache>/emu``), so a warm run finds it and loads it with
ctypes, without importing ``torch.utils.cpp_extension``. A cold build runs
``torch.utils.cpp_extension.load`` in a child interpreter with ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``
(the build must not load the backend it is building, and torch's autoload runs while
``import torch`` is still under way in the parent). Concurrent builds (xdist workers starting
together) wait on cpp_extension's own lock file in the build folder. The build child and what it
starts die with this process (:mod:`pytest_devcaps._util.process_lifetime`). A library is loaded only
as :mod:`pytest_devcaps.emu.loader` allows: ours, in its build folder, by descriptor, with the
digest recorded when it first loaded in a child.
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

from pytest_devcaps._util.environ import ENV_EMU_CACHE_DIR
from pytest_devcaps.emu.loader import (
    EmuBuildError,
    OpenLibrary,
    corruption,
    forget,
    load_in_child,
    open_checked,
    record_digest,
)

__all__ = ["EmuBuildError", "OpenLibrary", "ensure_built", "open_library"]

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


def ensure_built(torch_version: str, log: TextIO | None = None, *,
                 verify_in_child: bool = False) -> tuple[Path, float | None]:
    """The library for this torch, built first when missing or corrupt: (path, seconds the
    build took, or None when it was already built). A library found is checked
    (:mod:`pytest_devcaps.emu.loader`): refused when someone else could have written it,
    rebuilt when no digest was recorded for it at build time or it is not the file recorded
    (an unrecorded library is never loaded, not even in a child: its code is not known to be
    ours); ``verify_in_child`` loads a recorded one in a child first (``devcaps emu build``). Progress goes to ``log`` (default stderr)."""
    path = library_path(torch_version)
    log = log if log is not None else sys.stderr
    problem = _found_problem(path, verify_in_child)
    if problem is None:
        return path, None
    if problem is not _MISSING:
        print(f"devcaps emu: {path} {problem}: rebuilding it", file=log, flush=True)
        forget(path)
    toolchain = toolchain_problem()
    if toolchain is not None:
        raise EmuBuildError(f"cannot build the emu backend: {toolchain}")
    _make_folder(path.parent)
    print(f"devcaps emu: building the emulated device extension for torch {torch_version} "
          f"into {path.parent} (once; about a minute)...", file=log, flush=True)
    started = time.monotonic()
    _compile_in_child(path.parent, log)
    took = time.monotonic() - started
    _record_built(path)
    print(f"devcaps emu: built {path} in {took:.1f} s", file=log, flush=True)
    return path, took


_MISSING = "is missing"


def _found_problem(path: Path, verify_in_child: bool) -> str | None:
    """None when the library found may be loaded as it is; :data:`_MISSING`; else what is
    wrong with it (it is rebuilt). A refusal raises."""
    opened = open_checked(path, build_root())
    if opened is None:
        return _MISSING
    try:
        why = corruption(opened)
        if why is not None:  # not the file this devcaps built and recorded: never loaded, rebuilt
            return why
        if not verify_in_child:
            return None
        failure = load_in_child(path)
        return None if failure is None else f"is corrupt: {failure}"
    finally:
        opened.close()


def _record_built(path: Path) -> None:
    """After a build: the library must be there, pass the checks and load in a child; then its
    digest is recorded, and only then is it ever loaded here."""
    opened = open_checked(path, build_root())
    if opened is None:
        raise EmuBuildError(f"the emu build finished but left no {path.name} in {path.parent}")
    try:
        failure = load_in_child(path)
        if failure is not None:
            raise EmuBuildError(f"the emu build made {path}, but {failure}")
        _write_digest(path, opened.digest)
    finally:
        opened.close()


def is_built(torch_version: str) -> bool:
    """Whether a library for this torch is there, ours and the one recorded (nothing is built,
    loaded or raised)."""
    try:
        opened = open_checked(library_path(torch_version), build_root())
    except (EmuBuildError, OSError):
        return False
    if opened is None:
        return False
    try:
        return corruption(opened) is None
    finally:
        opened.close()


def open_library(torch_version: str) -> OpenLibrary:
    """The library for this torch, built or rebuilt as :func:`ensure_built` does, open by
    descriptor and matching its recorded digest: load ``load_path`` of what this returns."""
    path, _ = ensure_built(torch_version)
    opened = open_checked(path, build_root())
    if opened is None:
        raise EmuBuildError(f"{path} disappeared after it was built")
    why = corruption(opened)
    if why is not None:
        opened.close()
        raise EmuBuildError(f"refusing to load {path}: {why}; run devcaps emu build")
    return opened


def _cache_error(folder: Path, exc: OSError) -> EmuBuildError:
    return EmuBuildError(f"cannot use the emu cache folder {folder}: {exc.strerror or exc}; "
                         f"set {ENV_EMU_CACHE_DIR} to a folder of your own that you can write")


def _make_folder(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not os.access(folder, os.W_OK | os.X_OK):
            raise PermissionError(13, "Permission denied (the folder is read-only)")
    except OSError as exc:
        raise _cache_error(folder, exc) from None


def _write_digest(path: Path, digest: str) -> None:
    try:
        record_digest(path, digest)
    except OSError as exc:
        raise _cache_error(path.parent, exc) from None


#: What the build child runs (``sys.argv[2]``: the build folder), after entering the caller's
#: process lifetime: the compiler and ninja below it die with the CLI or pytest.
COMPILE_CODE = ("from pytest_devcaps.emu.extension import compile_library; "
                "compile_library(sys.argv[2])")


def _compile_in_child(directory: Path, log: TextIO) -> None:
    from pytest_devcaps._util.process_lifetime import ENTER_CODE, stop_tree

    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    command = [sys.executable, "-c", ENTER_CODE + COMPILE_CODE, str(os.getpid()), str(directory)]
    with tempfile.TemporaryFile("w+", encoding="utf-8") as output:
        child = subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT,
                                 start_new_session=os.name == "posix")
        try:
            code = _wait_with_progress(child, log, directory)
        finally:
            stop_tree(child)  # what the build left (ninja, g++), setsid or not; an interrupt too
        output.seek(0)
        text = output.read()
    if code != 0:
        tail = "\n".join(text.strip().splitlines()[-25:])
        raise EmuBuildError(f"the emu build failed (exit code {code}):\n{tail}")


PROGRESS_EVERY_S = 15.0
"""How often a build in progress says so (the compile step is silent otherwise)."""


def _wait_with_progress(child: subprocess.Popen[bytes], log: TextIO, directory: Path) -> int:
    """The child's exit code; meanwhile a line on ``log`` every :data:`PROGRESS_EVERY_S` with
    the compile step's elapsed time. Past :data:`BUILD_TIMEOUT_S` the child is killed."""
    started = time.monotonic()
    while True:
        try:
            return child.wait(timeout=PROGRESS_EVERY_S)
        except subprocess.TimeoutExpired:
            elapsed = time.monotonic() - started
            if elapsed >= BUILD_TIMEOUT_S:
                from pytest_devcaps._util.process_lifetime import stop_tree

                stop_tree(child)  # the guardian first: what the build started goes with it
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
