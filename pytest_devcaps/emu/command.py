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


def command_emu(args: argparse.Namespace) -> int:
    """Build (or find) the library and print its path; a build problem is a DevcapsError."""
    import torch

    from pytest_devcaps._util.environ import ENV_EMU_DEVICES
    from pytest_devcaps.emu.extension import ensure_built

    path, took = ensure_built(str(torch.__version__))
    if took is None:
        print(f"devcaps emu: already built: {path}", file=sys.stderr)
    print(path)
    if not os.environ.get(ENV_EMU_DEVICES, "").strip():
        print(f"devcaps emu: set {ENV_EMU_DEVICES}=N to give every process N emu devices",
              file=sys.stderr)
    return 0
