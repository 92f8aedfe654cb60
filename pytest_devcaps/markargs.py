"""Reading devcaps marker arguments: the keywords each marker (and decorator) takes, a typo
naming the closest; the capability names of ``requires_capability``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from pytest_devcaps.errors import MarkerError, did_you_mean

if TYPE_CHECKING:
    import pytest

#: Per marker, the keywords it takes (positional arguments are checked by each marker's parser).
MARKER_KEYWORDS: Mapping[str, tuple[str, ...]] = {
    "requires_capability": ("any_of", "native"),
    "requires_devices": (),
    "requires_memory": ("per_allocation", "free"),
    "dtypes": ("when",),
    "skip_on": ("when", "reason"),
    "xfail_on": ("when", "reason", "strict", "raises"),
    "tolerance": ("dtype", "atol", "rtol", "when"),
    "hardware": (),
}


def check_keywords(marker: str, kwargs: Mapping[str, Any]) -> None:
    """Refuse a keyword ``marker`` does not take, naming the closest one it does."""
    valid = MARKER_KEYWORDS[marker]
    for name in kwargs:
        if name not in valid:
            expected = ", ".join(f"{v}=" for v in valid) or "no keywords"
            raise MarkerError(marker, f"unexpected keyword {name}={kwargs[name]!r}"
                                      f"{did_you_mean(name, valid)}; expected {expected}")


def capability_names(mark: pytest.Mark) -> list[str]:
    """The capability names a ``requires_capability`` mark lists positionally."""
    names: list[str] = []
    for arg in mark.args:
        if isinstance(arg, str):
            names.append(arg)
        elif isinstance(arg, (list, tuple)):
            names.extend(arg)
        else:
            raise MarkerError("requires_capability", f"takes capability names, got {arg!r}")
    return names
