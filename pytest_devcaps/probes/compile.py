"""Compiler probes, answered statically: importing inductor costs seconds, compiling more."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from pytest_devcaps.model import ProbeOutcome
from pytest_devcaps.probes.base import device_type, ran, refused, unknown, unsupported
from pytest_devcaps.runtime import is_accelerator

_REGISTRATION = re.compile(r"""register_backend_for_device\(\s*["'](\w+)["']""")


def inductor_device_types() -> tuple[set[str], str]:
    """Device types inductor has a codegen backend for, and where that was read.

    Reads the in-tree registrations from ``init_backend_registration``'s source instead of
    importing inductor (which imports dynamo: over a second), then adds what is registered at
    run time: a renamed PrivateUse1 backend exposing ``Scheduling``, and the live registry
    when inductor is already imported.
    """
    import torch

    source = Path(torch.__file__).parent / "_inductor" / "codegen" / "common.py"
    try:
        found = set(_REGISTRATION.findall(source.read_text(encoding="utf-8")))
    except OSError:
        found = set()
    where = "torch/_inductor/codegen/common.py"
    live = sys.modules.get("torch._inductor.codegen.common")
    if live is not None:
        found |= set(getattr(live, "device_codegens", {}))
        where = "torch._inductor.codegen.common.device_codegens"
    private = torch._C._get_privateuse1_backend_name()
    if private != "privateuseone" and hasattr(getattr(torch, private, None), "Scheduling"):
        found.add(private)
    return found, where


def cpp_compiler() -> tuple[str | None, str]:
    """The C++ compiler inductor's CPU codegen would use: (path or None, what was tried)."""
    config = sys.modules.get("torch._inductor.config")
    if config is not None:
        candidates = [c for c in config.cpp.cxx if c]
    elif sys.platform == "win32":
        candidates = [os.environ.get("CXX", "cl")]
    else:
        candidates = [os.environ.get("CXX", "clang++" if sys.platform == "darwin" else "g++")]
    for candidate in candidates:
        path = shutil.which(candidate)
        if path:
            return path, candidate
    return None, ", ".join(candidates)


def _compiler_version(path: str) -> str:
    try:
        output = subprocess.run([path, "--version"], capture_output=True, text=True,
                                timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f"--version failed: {type(exc).__name__}"
    return output.strip().splitlines()[0] if output.strip() else ""


def probe_inductor(device: str) -> ProbeOutcome:
    kind = device_type(device)
    try:
        types, where = inductor_device_types()
    except Exception as exc:
        return refused("reading inductor's codegen registry", exc)
    if not types:
        return unknown(f"found no codegen registrations in {where}")
    if kind not in types:
        return unsupported(f"inductor has no codegen backend for {kind} "
                           f"(registered: {', '.join(sorted(types))})")
    if kind != "cpu":  # accelerator codegen needs Triton (or a vendor stack): compile.triton
        return ran(f"inductor registers a {kind} codegen backend ({where})")
    path, tried = cpp_compiler()
    if path is None:
        return unsupported(f"inductor's cpu codegen needs a C++ compiler; {tried} not found "
                           "on PATH (set CXX)")
    version = _compiler_version(path)
    if version.startswith("--version failed"):
        return unsupported(f"C++ compiler {path} does not run ({version})")
    return ran(f"inductor registers a cpu codegen backend ({where}); "
               f"C++ compiler {path} ({version})")


def triton_backend_names() -> list[str] | None:
    """Triton's installed backends, found without importing triton (None: not installed)."""
    spec = importlib.util.find_spec("triton")
    if spec is None:
        return None
    names = {entry.name for entry in importlib.metadata.entry_points(group="triton.backends")}
    for root in spec.submodule_search_locations or ():
        backends = Path(root) / "backends"
        if backends.is_dir():
            names |= {p.name for p in backends.iterdir()
                      if p.is_dir() and not p.name.startswith("__")}
    return sorted(names)


def probe_triton(device: str) -> ProbeOutcome:
    """Triton is installed and has an active driver for this device type."""
    kind = device_type(device)
    installed = triton_backend_names()
    if installed is None:
        return unsupported("triton is not installed")
    listing = ", ".join(installed) or "none"
    if not is_accelerator(kind):
        # Triton drivers target accelerators; a CPU backend exists only as the triton-cpu fork.
        if kind in installed:
            return ran(f"triton has a {kind} backend")
        return unsupported(f"Triton has no {kind.upper()} backend (TRITON_INTERPRET only); "
                           f"installed backends: {listing}")
    try:
        import triton
        import triton.backends
    except Exception as exc:
        return refused("import triton", exc)
    version = getattr(triton, "__version__", "?")
    active = []
    for name, backend in triton.backends.backends.items():
        try:
            if backend.driver.is_active():
                active.append(name)
        except Exception:
            continue
    if not active:
        return unsupported(f"triton {version} has no active driver for {kind} "
                           f"(installed backends: {listing})")
    return ran(f"triton {version} with active driver {', '.join(active)} for {kind}")
