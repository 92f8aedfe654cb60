"""Report files a fleet merges are created with the user's umask (they were 0600, so another
account of the fleet could not read them); caches stay private whatever the umask."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest


@pytest.mark.skipif(os.name != "posix", reason="POSIX modes")
def test_the_json_report_follows_the_umask_and_the_cache_stays_private(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("PYTEST_DEVCAPS_CACHE_DIR", str(cache))
    pytester.makepyfile(test_one="def test_one(device):\n    pass\n")
    old = os.umask(0o002)  # a group-shared fleet directory
    try:
        result = pytester.runpytest_subprocess("--devcaps-json=report.json", "-p", "no:randomly")
    finally:
        os.umask(old)
    result.assert_outcomes(passed=1)
    assert stat.S_IMODE((pytester.path / "report.json").stat().st_mode) == 0o664
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert [stat.S_IMODE(p.stat().st_mode) for p in cache.iterdir() if p.is_file()] == \
        [0o600] * len([p for p in cache.iterdir() if p.is_file()])
    assert any(cache.iterdir())
