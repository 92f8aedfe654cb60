"""``devcaps emu build``: build the emu extension now (idempotent: a built one is reused)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any


def add_parser(commands: Any) -> None:
    """The ``emu`` command and its ``build`` action on the CLI's subparsers."""
    emu = commands.add_parser("emu", help="the emulated accelerator 'emu' (a PrivateUse1 backend "
                              "of this package; PYTEST_DEVCAPS_EMU_DEVICES=N turns it on)")
    actions = emu.add_subparsers(dest="emu_command", required=True)
    actions.add_parser("build", help="build the emu extension into the devcaps cache (once per "
                       "torch version and source; progress on stderr)")


_AUTOLOAD = "TORCH_DEVICE_BACKEND_AUTOLOAD"


def command_emu(args: argparse.Namespace) -> int:
    """Build (or find and verify) the library and print its path: a library found is loaded
    in a child first, and rebuilt when it is corrupt; a refused one or an unusable cache
    folder is a DevcapsError (one line, exit 2)."""
    from pytest_devcaps._util.environ import ENV_EMU_DEVICES
    from pytest_devcaps.emu.extension import ensure_built
    from pytest_devcaps.runtime import import_torch

    previous = os.environ.get(_AUTOLOAD)
    os.environ[_AUTOLOAD] = "0"  # the build checks the library itself; torch must not load it
    try:
        torch = import_torch()
    finally:
        if previous is None:
            os.environ.pop(_AUTOLOAD, None)
        else:
            os.environ[_AUTOLOAD] = previous
    path, took = ensure_built(str(torch.__version__), verify_in_child=True)
    if took is None:
        print(f"devcaps emu: already built (it loads in a child process): {path}",
              file=sys.stderr)
    print(path)
    if not os.environ.get(ENV_EMU_DEVICES, "").strip():
        print(f"devcaps emu: set {ENV_EMU_DEVICES}=N to give every process N emu devices",
              file=sys.stderr)
    return 0
