"""The probe cache: wrong shapes are misses (never a crash, never silently fewer answers), only
real answers are stored, and a cache file someone else could have written is not believed."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import _bad_probes as bad
import pytest

from pytest_devcaps.registry.cache import ProbeCache
from pytest_devcaps.config import Catalogue, load_catalogue
from pytest_devcaps.model import DeviceIdentity, Level, ProbeOutcome
from pytest_devcaps.probes import ProbeSpec, runner
from pytest_devcaps.registry import RegistryOptions
from pytest_devcaps.registry.probing import ProbeResults, probe_devices

@pytest.fixture(scope="module")
def catalogue() -> Catalogue:
    return load_catalogue()


CPU = DeviceIdentity("cpu", None, "cpu", "test cpu", "avx2")
CALLS: list[str] = []


def bf16(device: str) -> ProbeOutcome:
    CALLS.append("dtype.bf16")
    return ProbeOutcome(Level.NATIVE, "bf16 ran")


def fp16(device: str) -> ProbeOutcome:
    CALLS.append("dtype.fp16")
    return ProbeOutcome(Level.UNSUPPORTED, "fp16 refused")


PROBES = {"dtype.bf16": ProbeSpec("dtype.bf16", bf16, isolated=False),
          "dtype.fp16": ProbeSpec("dtype.fp16", fp16, isolated=False)}


def _probe(catalogue: Catalogue, cache: Path, probes: dict[str, ProbeSpec] = PROBES,
           **options: object) -> ProbeResults:
    CALLS.clear()
    return probe_devices([CPU], catalogue, probes,
                         RegistryOptions(cache_dir=cache, **options))  # type: ignore[arg-type]


def _cache_file(cache: Path) -> Path:
    (path,) = cache.glob("probes-*.json")
    return path


def test_a_warm_cache_answers_without_probing(catalogue: Catalogue, tmp_path: Path) -> None:
    cold = _probe(catalogue, tmp_path)
    assert (cold.cache_status, sorted(CALLS)) == (["miss"], ["dtype.bf16", "dtype.fp16"])
    warm = _probe(catalogue, tmp_path)
    assert (warm.cache_status, CALLS) == (["hit"], [])
    assert warm.outcomes == cold.outcomes
    assert stat.S_IMODE(_cache_file(tmp_path).stat().st_mode) == 0o600


@pytest.mark.parametrize(("content", "problem"), [
    ("[]", "has the wrong shape"),
    ('"hello"', "has the wrong shape"),
    ("null", "has the wrong shape"),
    ("", "is not JSON"),
    ("{not json", "is not JSON"),
    ("{}", "has the wrong shape"),
    ('{"format": 1}', "has the wrong shape"),
    ('{"format": 1, "outcomes": []}', "has the wrong shape"),
    ('{"format": 1, "outcomes": {"dtype.bf16": "native"}}', "1 malformed entries"),
    ('{"format": 1, "outcomes": {"dtype.bf16": {"level": "native"}}}', "1 malformed entries"),
    ('{"format": 1, "outcomes": {"dtype.bf16": {"level": "nativ", "reason": "r"}}}',
     "1 malformed entries"),
    ("[" * 100000 + "]" * 100000, "is not JSON"),
])
def test_a_cache_file_of_the_wrong_shape_is_a_miss_and_is_rewritten(
        catalogue: Catalogue, tmp_path: Path, content: str, problem: str) -> None:
    first = _probe(catalogue, tmp_path)
    path = _cache_file(tmp_path)
    path.write_text(content)
    again = _probe(catalogue, tmp_path)
    assert re.fullmatch(rf"miss \(probes-\w+\.json:? {re.escape(problem)}\)",
                        again.cache_status[0]), again.cache_status
    assert sorted(CALLS) == ["dtype.bf16", "dtype.fp16"]  # every answer asked again
    assert again.outcomes == first.outcomes
    assert _probe(catalogue, tmp_path).cache_status == ["hit"]  # rewritten whole


def test_a_valid_but_incomplete_file_is_completed_not_trusted(catalogue: Catalogue,
                                                              tmp_path: Path) -> None:
    """A valid document missing answers used to drop them silently; now they are probed."""
    _probe(catalogue, tmp_path)
    path = _cache_file(tmp_path)
    data = json.loads(path.read_text())
    del data["outcomes"]["dtype.fp16"]
    path.write_text(json.dumps(data))
    partial = _probe(catalogue, tmp_path)
    assert (partial.cache_status, CALLS) == (["partial"], ["dtype.fp16"])
    assert partial.outcomes["cpu"]["dtype.fp16"] == ProbeOutcome(Level.UNSUPPORTED, "fp16 refused")
    path.write_text(json.dumps({"format": 1, "outcomes": {}}))
    assert _probe(catalogue, tmp_path).cache_status == ["miss"]
    assert sorted(CALLS) == ["dtype.bf16", "dtype.fp16"]


@pytest.mark.skipif(os.name != "posix", reason="POSIX modes and owners")
def test_a_cache_file_others_may_write_is_not_believed(catalogue: Catalogue,
                                                       tmp_path: Path) -> None:
    _probe(catalogue, tmp_path)
    path = _cache_file(tmp_path)
    data = json.loads(path.read_text())
    data["outcomes"]["dtype.fp16"] = {"level": "native", "reason": "planted"}
    path.write_text(json.dumps(data))
    path.chmod(0o666)
    refused = _probe(catalogue, tmp_path)
    assert refused.cache_status[0].startswith("miss (probes-") and \
        "writable by others" in refused.cache_status[0]
    assert refused.outcomes["cpu"]["dtype.fp16"].reason == "fp16 refused"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # replaced by our own file
    if os.getuid() == 0:  # a file another user owns, even read-only, is not believed either
        os.chown(path, 4242, 4242)
        foreign = _probe(catalogue, tmp_path)
        assert "owned by uid 4242" in foreign.cache_status[0] and len(CALLS) == 2


def test_transient_outcomes_are_not_cached_and_are_asked_again(
        catalogue: Catalogue, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One run with a tiny timeout must not poison every later run until --reprobe."""
    monkeypatch.setattr(runner, "PRELOAD", ())
    probes = {**PROBES, "dtype.fp64": ProbeSpec("dtype.fp64", bad.hangs)}
    first = _probe(catalogue, tmp_path, probes, probe_timeout=0.5)
    assert first.outcomes["cpu"]["dtype.fp64"] == ProbeOutcome(
        Level.UNKNOWN, "probe timed out after 0.5s", transient=True)
    assert "dtype.fp64" not in json.loads(_cache_file(tmp_path).read_text())["outcomes"]
    second = _probe(catalogue, tmp_path, probes, probe_timeout=0.5)
    assert second.cache_status == ["partial"] and CALLS == []  # only the timed-out probe reran
    assert second.outcomes["cpu"]["dtype.fp64"].transient


def test_storing_over_something_that_is_not_a_file_is_harmless(tmp_path: Path) -> None:
    cache = ProbeCache(tmp_path)
    (tmp_path / "probes-k.json").mkdir()
    cache.store("k", {"dtype.bf16": ProbeOutcome(Level.NATIVE, "ran")})
    lookup = cache.load("k")
    assert lookup.outcomes == {} and lookup.problem is not None
    assert "a directory, not a regular file" in lookup.problem


@pytest.mark.skipif(os.name != "posix", reason="POSIX modes and owners")
@pytest.mark.parametrize("mode", [0o777, 0o770, 0o722, 0o1777])
def test_a_cache_directory_others_may_write_is_neither_read_nor_written(
        catalogue: Catalogue, tmp_path: Path, mode: int) -> None:
    """Hostile: a planted, well-formed, private answer in a directory others may write (they
    could have put it there, or swap it between our check and our read)."""
    cache = tmp_path / "shared-cache"
    _probe(catalogue, cache)
    path = _cache_file(cache)
    data = json.loads(path.read_text())
    data["outcomes"]["dtype.fp16"] = {"level": "native", "reason": "planted"}
    path.write_text(json.dumps(data))
    path.chmod(0o600)
    cache.chmod(mode)
    try:
        refused = _probe(catalogue, cache)
        status = refused.cache_status[0]
        assert status.startswith("miss (probes-") and "not read: cache directory" in status
        assert f"writable by others (mode {mode:o})" in status
        assert sorted(CALLS) == ["dtype.bf16", "dtype.fp16"]  # probes still ran
        assert refused.outcomes["cpu"]["dtype.fp16"].reason == "fp16 refused"
        assert json.loads(path.read_text())["outcomes"]["dtype.fp16"]["reason"] == "planted"
    finally:
        cache.chmod(0o700)
    assert _probe(catalogue, cache).cache_status == ["hit"]  # a private directory again: read


@pytest.mark.skipif(os.name != "posix", reason="POSIX modes")
def test_a_new_cache_directory_is_private_whatever_the_umask(catalogue: Catalogue,
                                                             tmp_path: Path) -> None:
    old = os.umask(0o002)  # group-writable by default, as on many Linux desktops
    try:
        _probe(catalogue, tmp_path / "a" / "cache")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a" / "cache").stat().st_mode) == 0o700
    assert stat.S_IMODE(_cache_file(tmp_path / "a" / "cache").stat().st_mode) == 0o600
    assert _probe(catalogue, tmp_path / "a" / "cache").cache_status == ["hit"]


def test_a_cache_directory_that_is_a_file_is_refused_with_its_kind(tmp_path: Path) -> None:
    (tmp_path / "cache").write_text("")
    lookup = ProbeCache(tmp_path / "cache").load("k")
    assert lookup.outcomes == {} and lookup.problem is not None
    assert lookup.problem == (f"probes-k.json not read: cache directory "
                              f"{str(tmp_path / 'cache')!r} is a regular file, not a directory")
