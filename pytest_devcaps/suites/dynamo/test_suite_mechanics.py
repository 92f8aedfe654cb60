"""Self-checks of the suite's own machinery: test ordering, Dynamo reset, Inductor cache dir."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from torch._dynamo.utils import counters

from pytest_devcaps.errors import ConfigError
from pytest_devcaps.suites.dynamo.inductor_cache import cache_mode, choose_cache_dir
from pytest_devcaps.suites.dynamo.ordering import parse_order, reorder


@pytest.mark.parametrize(("value", "expected"), [
    ("", ("keep", None)),
    ("reversed", ("reversed", None)),
    (" Reversed ", ("reversed", None)),
    ("shuffle:42", ("shuffle", 42)),
], ids=["unset", "reversed", "case-and-spaces", "shuffle"])
def test_parse_order_accepts(value: str, expected: tuple[str, int | None]) -> None:
    assert parse_order(value) == expected


@pytest.mark.parametrize("value", ["random", "shuffle", "shuffle:x", "reverse"])
def test_parse_order_refuses_with_the_accepted_forms(value: str) -> None:
    with pytest.raises(ConfigError, match="expected 'reversed' or 'shuffle:<integer seed>'"):
        parse_order(value)


def _items(tmp_path: Path) -> list[Any]:
    suite, other = tmp_path / "suite", tmp_path / "other"
    return [SimpleNamespace(path=other / "a.py", name="o1"),
            SimpleNamespace(path=suite / "t.py", name="s1"),
            SimpleNamespace(path=suite / "t.py", name="s2"),
            SimpleNamespace(path=other / "b.py", name="o2"),
            SimpleNamespace(path=suite / "u.py", name="s3")]


def test_reorder_reverses_only_the_suite_items(tmp_path: Path) -> None:
    items = _items(tmp_path)
    reorder(items, (tmp_path / "suite").resolve(), "reversed")
    assert [item.name for item in items] == ["o1", "s3", "s2", "o2", "s1"]


def test_shuffle_is_a_seeded_permutation(tmp_path: Path) -> None:
    first, second = _items(tmp_path), _items(tmp_path)
    suite = (tmp_path / "suite").resolve()
    reorder(first, suite, "shuffle:3")
    reorder(second, suite, "shuffle:3")
    names = [item.name for item in first]
    assert names == [item.name for item in second], "same seed, same order (xdist needs it)"
    assert sorted(names) == ["o1", "o2", "s1", "s2", "s3"]
    assert (names[0], names[3]) == ("o1", "o2")


def test_dynamo_counters_start_empty() -> None:
    assert not counters, f"state left by an earlier test: {dict(counters)}"


def test_the_inductor_cache_fixture_sets_the_variable(inductor_cache_dir: Path) -> None:
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(inductor_cache_dir)
    assert inductor_cache_dir.is_dir()


def test_fresh_cache_belongs_to_the_run(tmp_path: Path) -> None:
    env = {"PYTEST_DEVCAPS_DYNAMO_CACHE": "Fresh", "TORCHINDUCTOR_CACHE_DIR": "/elsewhere"}
    cache = choose_cache_dir(env, tmp_path / "run", tmp_path / "devcaps", "2.13.0")
    assert cache == tmp_path / "run" / "inductor-cache" and cache.is_dir()


def test_shared_cache_is_keyed_by_torch_version_and_private(tmp_path: Path) -> None:
    cache = choose_cache_dir({}, tmp_path / "run", tmp_path / "devcaps", "2.13.0+cpu")
    assert cache == tmp_path / "devcaps" / "inductor" / "torch-2.13.0+cpu"
    assert stat.S_IMODE(cache.stat().st_mode) & 0o077 == 0
    assert choose_cache_dir({}, tmp_path / "run", tmp_path / "devcaps", "2.14.0a0 (local)") == \
        tmp_path / "devcaps" / "inductor" / "torch-2.14.0a0__local_"
    assert choose_cache_dir({"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "mine")}, tmp_path / "run",
                            tmp_path / "devcaps", "2.13.0") == tmp_path / "mine"


def test_a_shared_cache_others_may_write_is_refused(tmp_path: Path) -> None:
    cache = tmp_path / "devcaps" / "inductor" / "torch-2.13.0"
    cache.mkdir(parents=True)
    cache.chmod(0o777)
    with pytest.raises(ConfigError, match="is writable by others .* run with "
                                         "PYTEST_DEVCAPS_DYNAMO_CACHE=fresh"):
        choose_cache_dir({}, tmp_path / "run", tmp_path / "devcaps", "2.13.0")


def test_an_unknown_cache_mode_names_the_choices() -> None:
    with pytest.raises(ConfigError, match="PYTEST_DEVCAPS_DYNAMO_CACHE='tmp': expected 'shared' .* or 'fresh'"):
        cache_mode("tmp")
