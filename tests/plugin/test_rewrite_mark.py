"""pytest rewrites the asserts of every module of a wheel-installed pytest11 distribution; the
package moves that mark to its bundled suites when it is imported (``pytest_devcaps/__init__.py``).
An editable install (CI's) is not marked by pytest, so the hook is simulated here."""

from __future__ import annotations

import sys

import pytest

import pytest_devcaps


class _RewriteHook:
    """pytest's ``AssertionRewritingHook`` as far as the package reads it."""

    def __init__(self, marked: set[str]) -> None:
        self._must_rewrite = marked
        self._marked_for_rewrite_cache = {"pytest_devcaps.plugin": True, "xdist": True}

    def find_spec(self, *args: object) -> None:
        return None


def test_the_mark_moves_to_the_suites_and_others_keep_theirs(monkeypatch: pytest.MonkeyPatch) -> None:
    hook = _RewriteHook({"pytest_devcaps", "xdist", "devcaps_kernels"})
    monkeypatch.setattr(sys, "meta_path", [hook, *sys.meta_path])
    pytest_devcaps._rewrite_only_the_suites()
    assert hook._must_rewrite == {"pytest_devcaps.suites", "xdist", "devcaps_kernels"}
    assert hook._marked_for_rewrite_cache == {}  # pytest asks again, by the new marks


def test_a_hook_that_did_not_mark_us_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """An editable install, -p no:devcaps with a test importing us, or a pytest whose hook has other
    internals: nothing changes."""
    unmarked, other = _RewriteHook({"xdist"}), _RewriteHook({"pytest_devcaps"})
    other._must_rewrite = frozenset(other._must_rewrite)  # type: ignore[assignment]
    monkeypatch.setattr(sys, "meta_path", [unmarked, other, *sys.meta_path])
    pytest_devcaps._rewrite_only_the_suites()
    assert unmarked._must_rewrite == {"xdist"} and unmarked._marked_for_rewrite_cache
    assert other._must_rewrite == frozenset({"pytest_devcaps"})


def test_pytest_still_rewrites_the_suites_helpers(pytester: pytest.Pytester) -> None:
    """Marked as pytest marks a wheel-installed plugin (``mark_rewrite``, before the import): the
    suites still load through pytest's rewriting hook (their helpers' asserts explain themselves),
    the plugin's other modules as Python loads them."""
    pytester.makeconftest(
        """
        import sys
        hook = next(f for f in sys.meta_path if type(f).__name__ == "AssertionRewritingHook")
        for name in [n for n in sys.modules if n.startswith("pytest_devcaps")]:
            del sys.modules[name]  # imported again, as in a session that has not imported us yet
        hook.mark_rewrite("pytest_devcaps")
        import pytest_devcaps  # moves the mark
        import pytest_devcaps.session.keys, pytest_devcaps.suites
        print("marks:", sorted(m for m in hook._must_rewrite if "devcaps" in m))
        for name in ("pytest_devcaps.session.keys", "pytest_devcaps.suites"):
            print(name, "loaded by", type(sys.modules[name].__spec__.loader).__name__)
        """
    )
    pytester.makepyfile("def test_it():\n    pass\n")
    result = pytester.runpytest_subprocess("-s", "-p", "no:devcaps", "-p", "no:randomly")
    result.stdout.fnmatch_lines(["marks: ['pytest_devcaps.suites']",
                                 "pytest_devcaps.session.keys loaded by SourceFileLoader",
                                 "pytest_devcaps.suites loaded by AssertionRewritingHook"])
