"""One size grammar for requires_memory and the emu device memory."""

from __future__ import annotations

import pytest

from pytest_devcaps._util.sizes import format_size, size_bytes


@pytest.mark.parametrize(("value", "expected"), [
    ("24GiB", 24 * 2**30), ("24GB", 24 * 10**9), ("1.5 MiB", 3 * 2**19), ("512", 512), (4096, 4096),
    ("2tib", 2 * 2**40),
])
def test_size_bytes_reads_binary_and_decimal_units(value: object, expected: int) -> None:
    assert size_bytes(value) == expected


@pytest.mark.parametrize("value", ["lots", "-1GiB", "1 GiBs", "", True, 1.5, None])
def test_size_bytes_is_none_for_what_is_not_a_size(value: object) -> None:
    assert size_bytes(value) is None


@pytest.mark.parametrize(("size", "text"), [(24 * 2**30, "24GiB"), (3 * 2**19, "1.5MiB"), (1000, "1000B")])
def test_format_size(size: int, text: str) -> None:
    assert format_size(size) == text
