"""``marks.names.InheritedMarks``: the devcaps marks a test sees, each module's and class's share
read once. Checked against pytest's own ``iter_markers`` on real collected items, and on nodes of
our own that count how often a parent is walked."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from pytest_devcaps.marks.names import MARKER_NAMES, InheritedMarks, any_devcaps_mark

pytest_plugins = ["pytester"]


def _mark(name: str, *args: Any) -> pytest.Mark:
    return getattr(pytest.mark, name)(*args).mark


@dataclass(eq=False)
class _Node:
    """A node as pytest's: own marks, a parent, and ``iter_markers`` walking up (closest first)."""

    own_markers: list[pytest.Mark] = field(default_factory=list)
    parent: _Node | None = None

    def iter_markers(self) -> Any:
        node: _Node | None = self
        while node is not None:
            yield from node.own_markers
            node = node.parent


def _names(marks: list[pytest.Mark]) -> list[tuple[str, tuple[Any, ...]]]:
    return [(m.name, m.args) for m in marks]


def test_each_parent_is_walked_once_for_all_its_tests() -> None:
    session = _Node([_mark("requires_devices", 2)])
    module = _Node([_mark("dtypes", "f32"), _mark("filterwarnings", "ignore")], session)
    walks = []
    walk = module.iter_markers
    module.iter_markers = lambda: walks.append(1) or walk()  # type: ignore[method-assign]
    view = InheritedMarks()
    tests = [_Node([_mark("requires_memory", "1GB")], module), _Node([], module), _Node([], module)]
    assert [_names(view(t)) for t in tests] == [
        [("requires_memory", ("1GB",)), ("dtypes", ("f32",)), ("requires_devices", (2,))],
        [("dtypes", ("f32",)), ("requires_devices", (2,))],
        [("dtypes", ("f32",)), ("requires_devices", (2,))]]
    assert len(walks) == 1


def test_interleaved_parents_each_get_their_own_share() -> None:
    """The last parent's share is kept at hand: tests of two parents in turn (a reordering
    plugin, ``-p randomly``) must still each see their own parent's marks, each parent walked
    once."""
    first = _Node([_mark("hardware", "accelerator")])
    second = _Node([_mark("requires_devices", 2)])
    walks: list[str] = []
    for label, parent in (("first", first), ("second", second)):
        walk = parent.iter_markers
        parent.iter_markers = (lambda w=walk, n=label: walks.append(n) or w())  # type: ignore[method-assign]
    view = InheritedMarks()
    order = [first, second, first, first, second]
    assert [_names(view(_Node([], parent))) for parent in order] == [
        [("hardware", ("accelerator",))], [("requires_devices", (2,))], [("hardware", ("accelerator",))],
        [("hardware", ("accelerator",))], [("requires_devices", (2,))]]
    assert sorted(walks) == ["first", "second"]
    assert view.share(second) == tuple(second.own_markers) and view.share(first) == tuple(first.own_markers)
    assert view.share(None) == ()


def test_any_devcaps_mark_looks_at_names_only() -> None:
    assert any_devcaps_mark([_mark("parametrize", "x", [1]), _mark("requires_devices", 2)])
    assert not any_devcaps_mark([_mark("parametrize", "x", [1]), _mark("skipif", False)])
    assert not any_devcaps_mark([])


def test_a_node_without_a_parent_has_its_own_marks_only() -> None:
    assert _names(InheritedMarks()(_Node([_mark("hardware", "cuda")]))) == [("hardware", ("cuda",))]


def test_marks_that_are_not_ours_are_left_out() -> None:
    module = _Node([_mark("skipif", False), _mark("hardware", "accelerator")])
    item = _Node([_mark("parametrize", "x", [1]), _mark("xfail_on", "cuda")], module)
    assert _names(InheritedMarks()(item)) == [("xfail_on", ("cuda",)), ("hardware", ("accelerator",))]


def test_it_agrees_with_iter_markers_on_collected_items(pytester: pytest.Pytester) -> None:
    """Module, class, nested class and test marks, with marks of other plugins between them."""
    pytester.makeconftest(
        """
        from pytest_devcaps.marks.names import MARKER_NAMES, InheritedMarks

        def pytest_collection_modifyitems(items):
            view = InheritedMarks()
            for item in items:
                want = [m for m in item.iter_markers() if m.name in MARKER_NAMES]
                got = view(item)
                print(item.name, "same" if got == want else f"DIFFERENT {got} {want}", len(got))
        """
    )
    pytester.makepyfile(
        """
        import pytest

        pytestmark = [pytest.mark.requires_devices(1), pytest.mark.filterwarnings("ignore")]

        @pytest.mark.hardware("accelerator")
        class TestOuter:
            @pytest.mark.requires_capability("dtype.bf16")
            def test_a(self):
                pass

            class TestInner:
                @pytest.mark.skipif(False, reason="no")
                def test_b(self):
                    pass

        @pytest.mark.parametrize("x", [1, 2])
        @pytest.mark.requires_memory("1GB")
        def test_c(x):
            pass

        def test_d():
            pass
        """
    )
    result = pytester.runpytest("--co", "-q", "-s", "-p", "no:randomly")
    result.stdout.fnmatch_lines(["test_a same 3", "test_b same 2", "test_c[[]1[]] same 2",
                                 "test_c[[]2[]] same 2", "test_d same 1"])
    result.stdout.no_fnmatch_line("*DIFFERENT*")
    assert {"requires_devices", "hardware", "requires_capability", "requires_memory"} <= MARKER_NAMES
