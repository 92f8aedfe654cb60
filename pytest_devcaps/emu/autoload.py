"""torch's device-backend autoload entry point for emu (entry-point group ``torch.backends``).

``import torch`` calls :func:`autoload` in every process (``torch/__init__.py``
``_import_device_backends``; ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` turns it off), so pytest, xdist
workers, probe children, distributed ranks and the CLI all see the same emu devices. Without
``PYTEST_DEVCAPS_EMU_DEVICES`` it returns at once: installing pytest-devcaps changes nothing
for anyone. With it, the extension is loaded, built first when missing (with a message on
stderr), or the import of torch fails saying why: never a silent "no device".

What it registers is what PyTorch's OpenReg does (``torch_openreg/__init__.py``):
``torch.utils.rename_privateuse1_backend``, ``torch._register_device_module``,
``torch.utils.generate_methods_for_privateuse1_backend``; and, as a vendor's collective library
does, the ``emuccl`` ``torch.distributed`` backend for the emu device type
(:mod:`pytest_devcaps.emu.emuccl`). At exit it waits for autograd's device threads to let go
of the last backward (:mod:`pytest_devcaps.emu.autograd_exit`: without it a process can abort
as it ends).
"""

from __future__ import annotations

import os
from typing import Any

_loaded = False


def autoload() -> None:
    """Load the emu backend when this process asks for it; raise when it cannot be had."""
    from pytest_devcaps.emu.config import requested

    if _loaded or not requested(os.environ):
        return
    from pytest_devcaps.errors import DevcapsError, DeviceRuntimeError

    try:
        load()
    except DevcapsError as exc:
        # torch wraps this in "Failed to load the backend extension: devcaps_emu ..." (the
        # cause: this error); runtime.import_torch turns that into one line.
        raise DeviceRuntimeError(f"pytest-devcaps emu backend: {exc}") from None


def load() -> None:
    """Build if needed, load the library, set the device count and each device's memory, rename
    PrivateUse1 to emu, register the collective backend and the exit drain."""
    global _loaded
    import ctypes

    import torch
    from torch.utils.backend_registration import (
        generate_methods_for_privateuse1_backend,
        rename_privateuse1_backend,
    )

    from pytest_devcaps.emu import NAME, autograd_exit, device, emuccl
    from pytest_devcaps.emu.extension import EXTENSION, open_library
    from pytest_devcaps.emu.config import device_count, device_memory

    count = device_count(os.environ)
    memory = device_memory(os.environ, count)
    opened = open_library(str(torch.__version__))  # checked, open by descriptor, digest matched
    try:
        library: Any = ctypes.CDLL(opened.load_path)
        # The same file as a Python extension module (the EmuBackend class): the dynamic
        # loader hands back the copy ctypes mapped (the same inode), so both share the devices
        # and the allocator.
        device.bind(library, _import_extension(EXTENSION, opened.load_path))
    finally:
        opened.close()
    library.devcaps_emu_set_device_count(count)
    library.devcaps_emu_set_device_memory(memory)
    rename_privateuse1_backend(NAME)
    register: Any = torch._register_device_module
    register(NAME, device)
    generate_methods_for_privateuse1_backend(for_storage=True)
    emuccl.register()
    autograd_exit.register(NAME, count)
    _loaded = True


def _import_extension(name: str, path: str) -> Any:
    """The extension module in the library at ``path`` (the file the trust check passed)."""
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.ExtensionFileLoader(name, path)
    spec = importlib.util.spec_from_loader(name, loader, origin=path)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module
