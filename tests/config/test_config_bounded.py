"""Bounded parsing: a few hostile bytes (or a device file) must cost a clear error, never
gigabytes, a hang or a traceback. The same for catalogue, override and profile files."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable

import pytest

from pytest_devcaps.config import Catalogue, load_catalogue, load_overrides, load_profile
from pytest_devcaps.config.yamlsource import MAX_ALIAS_NODES, parse_yaml
from pytest_devcaps.errors import ConfigError, short_repr

Loader = Callable[[Path, Catalogue], object]
LOADERS: dict[str, Loader] = {
    "catalogue": lambda path, catalogue: load_catalogue(path),
    "overrides": lambda path, catalogue: load_overrides([path], catalogue),
    "profile": lambda path, catalogue: load_profile(path, catalogue),
}


def _error(load: Loader, path: Path, catalogue: Catalogue) -> ConfigError:
    started = time.monotonic()
    with pytest.raises(ConfigError) as info:
        load(path, catalogue)
    assert time.monotonic() - started < 30  # generous: a regression reads forever
    assert info.value.file == str(path)
    return info.value


def _alias_bomb(levels: int = 9) -> str:
    text = 'devcaps: 1\nx0: &x0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n'
    for level in range(1, levels):
        refs = ", ".join([f"*x{level - 1}"] * 8)
        text += f"x{level}: &x{level} [{refs}]\n"
    return text


@pytest.mark.parametrize("kind", LOADERS)
def test_an_alias_bomb_is_refused_before_it_is_built(tmp_path: Path, catalogue: Catalogue,
                                                     kind: str) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(_alias_bomb())  # ~500 bytes, 19 million nodes once expanded
    error = _error(LOADERS[kind], path, catalogue)
    assert "aliases expand this document by" in error.message
    assert f"at most {MAX_ALIAS_NODES} are accepted" in error.message
    assert len(str(error)) < 300


def test_ordinary_anchors_and_merge_keys_still_load() -> None:
    document = parse_yaml("base: &b {level: native, reason: r}\n"
                          "a: *b\nc:\n  <<: *b\n  extra: 1\n")
    assert document["a"] == {"level": "native", "reason": "r"}
    assert document["c"] == {"level": "native", "reason": "r", "extra": 1}


def test_a_recursive_alias_is_refused() -> None:
    with pytest.raises(ConfigError, match="an alias refers to a node that contains it"):
        parse_yaml("a: &a [1, *a]\n", "r.yaml")


@pytest.mark.skipif(os.name != "posix", reason="device files and FIFOs are POSIX")
@pytest.mark.parametrize("kind", LOADERS)
@pytest.mark.parametrize("special", ["/dev/zero", "/dev/urandom", "fifo", "directory"])
def test_only_regular_files_are_read(tmp_path: Path, catalogue: Catalogue, kind: str,
                                     special: str) -> None:
    path = Path(special)
    if special == "fifo":  # nobody writes to it: a plain open() would wait forever
        path = tmp_path / "fifo.yaml"
        os.mkfifo(path)
    elif special == "directory":
        path = tmp_path / "dir.yaml"
        path.mkdir()
    error = _error(LOADERS[kind], path, catalogue)
    assert error.message.startswith("cannot read it: ")
    assert "not a regular file" in error.message


@pytest.mark.parametrize("kind", LOADERS)
def test_files_over_16_mib_are_refused(tmp_path: Path, catalogue: Catalogue, kind: str) -> None:
    path = tmp_path / "huge.yaml"
    with path.open("wb") as handle:
        handle.write(b"devcaps: 1\n")
        handle.truncate(16 * 2**20 + 1)
    error = _error(LOADERS[kind], path, catalogue)
    assert "files over 16 MiB are not read" in error.message


@pytest.mark.parametrize(("value", "words"), [
    ("9" * 5000, "integer with 5000 digits; at most 40 are accepted"),
    ("-" + "1" * 41, "integer with 41 digits"),
    (".inf", ".inf is not a finite number"),
    ("-.inf", "-.inf is not a finite number"),
    (".nan", ".nan is not a finite number"),
])
def test_huge_and_non_finite_numbers_are_clear_errors(tmp_path: Path, catalogue: Catalogue,
                                                      value: str, words: str) -> None:
    path = tmp_path / "profile.yaml"
    path.write_text("devcaps: 1\nprofile:\n  name: p\n  devices:\n"
                    f"    - {{type: cuda, arch: sm_90, facts: {{sm: {value}}}}}\n")
    error = _error(LOADERS["profile"], path, catalogue)
    assert error.line == 5 and words in error.message


@pytest.mark.parametrize("memory", ["memory_gib: .inf", "memory_gib: 1.0e+300",
                                    "memory_bytes: 99999999999999999999999"])
def test_absurd_device_memory_is_a_clear_error(tmp_path: Path, catalogue: Catalogue,
                                               memory: str) -> None:
    path = tmp_path / "profile.yaml"
    path.write_text("devcaps: 1\nprofile:\n  name: p\n  devices:\n"
                    f"    - type: cuda\n      arch: sm_90\n      {memory}\n")
    error = _error(LOADERS["profile"], path, catalogue)
    assert error.line == 7
    assert "not a finite number" in error.message or "more than 16 EiB" in error.message


def test_a_document_nested_too_deeply_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="nest"):
        parse_yaml("a: " + "[" * 20000 + "]" * 20000 + "\n", "deep.yaml")


@pytest.mark.parametrize("bad", [
    "level: " + "x" * 1_000_000,
    "level: [" + ", ".join(["[1, 2, 3, 4, 5, 6, 7, 8]"] * 2000) + "]",
    "lvel" + "e" * 100_000 + ": native",
])
def test_error_messages_quote_values_briefly(tmp_path: Path, catalogue: Catalogue,
                                             bad: str) -> None:
    path = tmp_path / "overrides.yaml"
    path.write_text(f"devcaps: 1\noverrides:\n  - set:\n      dtype.bf16:\n        {bad}\n")
    error = _error(LOADERS["overrides"], path, catalogue)
    assert len(str(error)) < 600, str(error)[:1000]


def test_short_repr_cuts_long_and_nested_values() -> None:
    from pytest_devcaps.config.yamlsource import LineDict, LineList

    assert short_repr("short") == "'short'"
    assert len(short_repr("x" * 10_000)) <= 100
    nested: list[object] = []
    for _ in range(1000):
        nested = [nested, nested]
    assert len(short_repr(nested)) <= 100
    # The loader's own containers are cut too (reprlib would print a dict subclass in full).
    wide = LineDict({f"key{i}": LineList(range(1000)) for i in range(1000)})
    assert len(short_repr(wide)) <= 100
