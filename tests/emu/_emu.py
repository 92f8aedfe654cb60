"""Running Python in a fresh interpreter that has emu devices (``import torch`` loads emu only
when the variable is set as it starts): the script prints one JSON document as its last line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from pytest_devcaps.emu import DEVICES_ENV, VISIBLE_ENV
from pytest_devcaps.emu.extension import CACHE_ENV


def emu_environ(cache: Path, devices: int = 2) -> dict[str, str]:
    """This environment with ``devices`` emu devices per process, built into ``cache``."""
    env = {k: v for k, v in os.environ.items()
           if k not in (VISIBLE_ENV, "TORCH_DEVICE_BACKEND_AUTOLOAD")}
    env.update({CACHE_ENV: str(cache), DEVICES_ENV: str(devices)})
    return env


def run_json(script: str, env: dict[str, str], *args: str, timeout: float = 300) -> Any:
    """Run ``script`` (dedented); its last stdout line is JSON. Fails with its stderr."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args], env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
