"""One environment-variable prefix: ``PYTEST_DEVCAPS_*``. The old ``DEVCAPS_*`` names still work
with a deprecation warning naming the new one; both set and different is an error naming both."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from pytest_devcaps._util import environ
from pytest_devcaps.distributed import settings
from pytest_devcaps.errors import ConfigError, DevcapsDeprecationWarning, DevcapsWarning
from pytest_devcaps.suites.dynamo.inductor_cache import cache_mode
from pytest_devcaps.suites.dynamo.ordering import parse_order


def test_every_variable_has_the_one_prefix_and_every_old_name_is_mapped() -> None:
    assert all(new.startswith("PYTEST_DEVCAPS_") and new == "PYTEST_" + old
               for new, old in environ.RENAMED.items())
    assert {settings.TIMEOUT_VARIABLE, settings.PG_TIMEOUT_VARIABLE, settings.SHARE_VARIABLE,
            settings.REUSE_VARIABLE} <= set(environ.RENAMED)
    assert issubclass(DevcapsDeprecationWarning, DevcapsWarning)
    assert not issubclass(DevcapsDeprecationWarning, DeprecationWarning)  # Python would hide it


def test_the_old_name_works_with_a_warning_naming_the_new_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_DEVCAPS_DIST_TIMEOUT", raising=False)
    monkeypatch.setenv("DEVCAPS_DIST_TIMEOUT", "7")
    with pytest.warns(DevcapsDeprecationWarning,
                      match="DEVCAPS_DIST_TIMEOUT is deprecated; set PYTEST_DEVCAPS_DIST_TIMEOUT"):
        assert settings.watchdog_timeout() == 7.0
    monkeypatch.setenv("DEVCAPS_DIST_REUSE", "off")
    with pytest.warns(DevcapsDeprecationWarning, match="set PYTEST_DEVCAPS_DIST_REUSE instead"):
        assert settings.reuse_worlds() is False


def test_a_bad_old_value_is_refused_under_the_name_it_was_set_as(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEVCAPS_DIST_SHARE_DEVICES", "maybe")
    with pytest.warns(DevcapsDeprecationWarning), \
            pytest.raises(ConfigError, match="^DEVCAPS_DIST_SHARE_DEVICES: expected 1/true"):
        settings.share_devices()


@pytest.mark.parametrize(("new", "old", "new_value", "old_value"), [
    ("PYTEST_DEVCAPS_DIST_TIMEOUT", "DEVCAPS_DIST_TIMEOUT", "10", "600"),
    ("PYTEST_DEVCAPS_DIST_REUSE", "DEVCAPS_DIST_REUSE", "1", "0"),
    ("PYTEST_DEVCAPS_DYNAMO_CACHE", "DEVCAPS_DYNAMO_CACHE", "fresh", ""),  # empty is a value too
])
def test_both_names_set_and_different_is_an_error_naming_both(
        monkeypatch: pytest.MonkeyPatch, new: str, old: str, new_value: str,
        old_value: str) -> None:
    """Hostile: a CI image sets the old name, a job the new one, to different values."""
    monkeypatch.setenv(new, new_value)
    monkeypatch.setenv(old, old_value)
    with pytest.raises(ConfigError) as error:
        environ.lookup(new)
    assert str(error.value) == (f"{new}: {new}={new_value!r} and its old name {old}="
                                f"{old_value!r} are both set and differ; unset {old}")


def test_both_names_set_alike_is_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_DEVCAPS_DIST_PG_TIMEOUT", "30")
    monkeypatch.setenv("DEVCAPS_DIST_PG_TIMEOUT", "30")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert settings.pg_timeout() == 30.0


def test_the_dynamo_variables_name_what_was_set() -> None:
    with pytest.raises(ConfigError, match="^DEVCAPS_DYNAMO_ORDER='up': expected"):
        parse_order("up", "DEVCAPS_DYNAMO_ORDER")
    with pytest.raises(ConfigError, match="^PYTEST_DEVCAPS_DYNAMO_CACHE='tmp': expected"):
        cache_mode("tmp")


def test_no_old_name_is_read_anywhere_else() -> None:
    """Every read of an old name goes through environ.lookup: a grep of the package for an
    old name finds it only in the rename table and in prose."""
    import pathlib

    import pytest_devcaps

    root = pathlib.Path(pytest_devcaps.__file__).parent
    for path in root.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for old in environ.RENAMED.values():
            for line in text.splitlines():
                if f'"{old}"' in line or f"'{old}'" in line:
                    assert path.name in ("environ.py", "test_suite_mechanics.py"), (path, line)


def test_the_dynamo_suite_honours_the_old_order_name_with_a_warning(tmp_path: object) -> None:
    env = {k: v for k, v in os.environ.items() if "DYNAMO" not in k}
    env["DEVCAPS_DYNAMO_ORDER"] = "sideways"
    done = subprocess.run([sys.executable, "-m", "pytest", "--pyargs",
                           "pytest_devcaps.suites.dynamo", "--collect-only", "-q",
                           "-p", "no:randomly", "-p", "no:cacheprovider"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 4, done.stdout + done.stderr
    assert "DEVCAPS_DYNAMO_ORDER='sideways': expected 'reversed'" in done.stderr


def test_the_old_dynamo_cache_name_still_chooses_a_fresh_cache(tmp_path: Path) -> None:
    from pytest_devcaps.suites.dynamo.inductor_cache import choose_cache_dir

    with pytest.warns(DevcapsDeprecationWarning, match="set PYTEST_DEVCAPS_DYNAMO_CACHE"):
        cache = choose_cache_dir({"DEVCAPS_DYNAMO_CACHE": "fresh"}, tmp_path / "run",
                                 tmp_path / "devcaps", "2.13.0")
    assert cache == tmp_path / "run" / "inductor-cache"
    with pytest.raises(ConfigError, match="^DEVCAPS_DYNAMO_CACHE='tmp': expected"), \
            pytest.warns(DevcapsDeprecationWarning):
        choose_cache_dir({"DEVCAPS_DYNAMO_CACHE": "tmp"}, tmp_path / "run", tmp_path / "devcaps",
                         "2.13.0")
