"""Opt-in reordering of this suite's tests, to show that no test depends on another's state.

``PYTEST_DEVCAPS_DYNAMO_ORDER=reversed`` runs the suite's tests last-to-first;
``PYTEST_DEVCAPS_DYNAMO_ORDER=shuffle:<seed>`` runs them in an order shuffled with that integer seed.
Unset (or empty) keeps pytest's order. The old name ``DEVCAPS_DYNAMO_ORDER`` still works,
with a deprecation warning. The order only depends on the variable, so every
pytest-xdist worker collects the same list.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Sequence

import pytest

from pytest_devcaps.errors import ConfigError
from pytest_devcaps._util.environ import ENV_DYNAMO_ORDER

#: The earlier name of the constant (the table in ``_util.environ`` is the source).
ORDER_VARIABLE = ENV_DYNAMO_ORDER


def parse_order(value: str, variable: str = ENV_DYNAMO_ORDER) -> tuple[str, int | None]:
    """``("keep", None)``, ``("reversed", None)`` or ``("shuffle", seed)``; ConfigError naming
    ``variable`` (the name the value was set under) otherwise."""
    text = value.strip().lower()
    if not text:
        return "keep", None
    if text == "reversed":
        return "reversed", None
    kind, _, seed = text.partition(":")
    if kind == "shuffle" and seed.strip().lstrip("-").isdigit():
        return "shuffle", int(seed)
    raise ConfigError(f"{variable}={value!r}: expected 'reversed' or 'shuffle:<integer seed>'")


def reorder(items: list[pytest.Item], suite_dir: Path, value: str,
            variable: str = ENV_DYNAMO_ORDER) -> None:
    """Reorder, in place, the items collected from ``suite_dir``; other items keep their slots."""
    kind, seed = parse_order(value, variable)
    if kind == "keep":
        return
    slots = [index for index, item in enumerate(items) if _inside(item, suite_dir)]
    ours: Sequence[pytest.Item] = [items[index] for index in slots]
    if kind == "reversed":
        ours = list(reversed(ours))
    else:
        ours = list(ours)
        random.Random(seed).shuffle(ours)
    for index, item in zip(slots, ours):
        items[index] = item


def _inside(item: pytest.Item, suite_dir: Path) -> bool:
    return Path(item.path).resolve().is_relative_to(suite_dir)
