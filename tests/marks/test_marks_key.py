"""``marks.names.marks_key``: marks by value, the key evaluations, classifications and validations
are kept under (issue 32 item 8). Equal keys must mean marks that read the same."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_devcaps.marks.names import marks_key


def _marks(*specs: tuple[str, tuple[Any, ...], dict[str, Any]]) -> list[pytest.Mark]:
    return [getattr(pytest.mark, name)(*args, **kwargs).mark for name, args, kwargs in specs]


def test_equal_marks_written_apart_have_one_key() -> None:
    first = _marks(("requires_capability", ("dist.gloo",), {"native": True, "any_of": ("a", "b")}))
    second = _marks(("requires_capability", ("dist.gloo",), {"any_of": ("a", "b"), "native": True}))
    assert first[0] is not second[0]
    assert marks_key(first) == marks_key(second)
    assert hash(marks_key(first)) == hash(marks_key(second))


@pytest.mark.parametrize("other", [
    _marks(("requires_capability", ("dist.nccl",), {})),  # another argument
    _marks(("requires_devices", ("dist.gloo",), {})),  # another mark
    _marks(("requires_capability", ("dist.gloo",), {"native": True})),  # a keyword more
    _marks(("requires_capability", ("dist.gloo",), {}), ("requires_devices", (2,), {})),  # a mark more
], ids=["argument", "name", "keyword", "count"])
def test_marks_that_differ_have_different_keys(other: list[pytest.Mark]) -> None:
    assert marks_key(_marks(("requires_capability", ("dist.gloo",), {}))) != marks_key(other)


def test_arguments_of_another_type_are_not_the_same_marks() -> None:
    """1 == 1.0 == True in Python (and in a tuple's equality): the key tells them apart, so a
    mark whose argument a check would refuse never shares an answer with one it accepts."""
    keys = {marks_key(_marks(("requires_devices", (value,), {}))) for value in (1, 1.0, True)}
    assert len(keys) == 3
    keys = {marks_key(_marks(("requires_capability", ("x",), {"native": value}))) for value in (1, True)}
    assert len(keys) == 2
    keys = {marks_key(_marks(("skip_on", (("x", value),), {"reason": (value,)}))) for value in (1, 1.0, True)}
    assert len(keys) == 3  # inside a tuple too


def test_order_of_marks_counts_and_no_marks_is_a_key() -> None:
    a, b = _marks(("requires_devices", (2,), {}), ("skip_on", ("vendor == 'x'",), {"reason": "r"}))
    assert marks_key([a, b]) != marks_key([b, a])
    assert marks_key([]) == ()


def test_an_unhashable_argument_has_no_key() -> None:
    assert marks_key(_marks(("requires_capability", (["a", "b"],), {}))) is None
    assert marks_key(_marks(("dtypes", (), {"when": {"cuda": ("f16",)}}))) is None
