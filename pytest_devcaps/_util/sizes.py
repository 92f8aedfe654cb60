"""Memory sizes as people write them: ``"24GiB"`` (2**30 bytes each), ``"24GB"`` (10**9), or an
int of bytes. One grammar for ``requires_memory`` and the emu device size
(``PYTEST_DEVCAPS_EMU_MEMORY``)."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*$", re.IGNORECASE)
_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
#: The largest size anyone may ask for: a 64-bit address space (16 EiB).
MAX_SIZE = 2**64


def size_bytes(value: Any) -> int | None:
    """Bytes of ``value`` (an int of bytes, or ``"1.5GiB"``); None where it is neither. Range
    checks (more than 0, at most :data:`MAX_SIZE`) are the caller's, who names the setting."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and (match := _SIZE.match(value)):
        # Decimal, not float: '9' * 400 + 'TiB' must be "too large", not inf or OverflowError.
        return int(Decimal(match.group(1)) * _UNITS[(match.group(2) or "B").lower()])
    return None


def format_size(size: int) -> str:
    """``25769803776`` -> ``24GiB``."""
    for unit, factor in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= factor:
            return f"{size / factor:.4g}{unit}"
    return f"{size}B"
