"""The catalogue's warm-start cache is JSON data (it cannot run code), validated on every load,
and read only when this user owns it and nobody else may write it."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import stat
from pathlib import Path
from typing import Any

import pytest

from pytest_devcaps.config import Catalogue, classify, load_profile, shipped_catalogue_path
from pytest_devcaps.config import catalogue as catalogue_module
from pytest_devcaps.config.yamlsource import parse_yaml_bytes
from pytest_devcaps.version import __version__


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "cache"
    monkeypatch.setenv("PYTEST_DEVCAPS_CACHE_DIR", str(directory))
    return directory


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "capabilities.yaml"
    path.write_bytes(shipped_catalogue_path().read_bytes())
    return path


PARSES: list[str] = []


@pytest.fixture
def count_parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Counts YAML parses of the catalogue (a warm load must not need one)."""
    PARSES.clear()

    def counting(raw: bytes, name: str) -> Any:
        PARSES.append(name)
        return parse_yaml_bytes(raw, name)

    monkeypatch.setattr(catalogue_module, "parse_yaml_bytes", counting)
    return PARSES


def _load(path: Path) -> Catalogue:
    return catalogue_module._parsed_with_disk_cache(path)


def _same(a: Catalogue, b: Catalogue) -> bool:
    h100 = load_profile("nvidia-h100", a).identities[0]
    rules = [(v, c, r.level, r.reason, r.when and r.when.text, r.line)
             for v, by_cap in a.rules.items() for c, rs in by_cap.items() for r in rs]
    other = [(v, c, r.level, r.reason, r.when and r.when.text, r.line)
             for v, by_cap in b.rules.items() for c, rs in by_cap.items() for r in rs]
    return (a == b and dict(a.capabilities) == dict(b.capabilities) and rules == other
            and classify(a, h100) == classify(b, h100))


def test_the_warm_cache_is_json_and_spares_the_yaml_parse(
        cache: Path, source: Path, count_parses: list[str]) -> None:
    cold = _load(source)
    (stored,) = cache.iterdir()
    assert stored.name.startswith("catalogue-") and stored.suffix == ".json"
    assert json.loads(stored.read_text())["format"] == 1
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    warm = _load(source)
    assert count_parses == [str(source)]  # the cold load only
    assert _same(cold, warm)


def test_a_planted_pickle_is_never_loaded(cache: Path, source: Path, tmp_path: Path) -> None:
    """The old cache unpickled catalogue-<key>.pickle, a key anyone can compute."""
    marker = tmp_path / "code-ran"

    class Payload:
        def __reduce__(self) -> tuple[Any, ...]:
            return (Path.touch, (marker,))

    raw = source.read_bytes()
    for fmt in range(1, 5):
        key = hashlib.sha256(raw + f"{__version__}/{fmt}".encode()).hexdigest()[:32]
        cache.mkdir(exist_ok=True)
        (cache / f"catalogue-{key}.pickle").write_bytes(pickle.dumps(Payload()))
    _load(source)
    assert not marker.exists()
    assert not hasattr(catalogue_module, "pickle")


@pytest.mark.skipif(os.name != "posix", reason="POSIX modes and owners")
def test_a_copy_others_may_write_is_parsed_again_and_replaced(
        cache: Path, source: Path, count_parses: list[str]) -> None:
    _load(source)
    (stored,) = cache.iterdir()
    stored.chmod(0o666)
    _load(source)
    assert len(count_parses) == 2
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    if os.getuid() == 0:
        os.chown(stored, 4242, 4242)
        _load(source)
        assert len(count_parses) == 3


@pytest.mark.parametrize("content", [
    "[]", '"hello"', "null", "", "{}", '{"format": 1}', '{"format": 1, "document": []}',
    '{"format": 1, "document": {"m": 1, "k": "x"}}',
    '{"format": 1, "document": {"m": 0, "k": []}}',
    '{"format": 1, "document": {"l": 1, "i": [[1]]}}',
    # valid JSON, a valid document shape, but not a valid catalogue: validated, so refused
    '{"format": 1, "document": {"m": 1, "k": [["devcaps", 1, 2]]}}',
    '{"format": 1, "document": ' + "[" * 50000 + "]" * 50000 + "}",
])
def test_a_copy_of_the_wrong_shape_is_parsed_again_and_rewritten(
        cache: Path, source: Path, count_parses: list[str], content: str) -> None:
    cold = _load(source)
    (stored,) = cache.iterdir()
    stored.write_text(content)
    stored.chmod(0o600)
    again = _load(source)
    assert _same(cold, again) and len(count_parses) == 2
    _load(source)
    assert len(count_parses) == 2  # the rewritten copy serves the next load
