"""The names the plugin recognises on every test before it needs any of their machinery.

Every pytest session of an environment loads the plugin, most of them never using devcaps: its
hooks look at each test's marks and fixtures by these names alone, and import ``evaluation``,
``parametrize`` and the catalogue only for a test that has one (``tests/test_architecture.py``
checks that a session of plain tests imports none of them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Hashable, Mapping, Sequence

if TYPE_CHECKING:
    import pytest
    from _pytest.nodes import Node

#: ``pytest --markers`` lines of every devcaps marker (``evaluation.SIGNATURES`` has one entry each).
MARKER_LINES = (
    "requires_capability(*capabilities, any_of=None, native=False): skip unless the test's device "
    "has every capability (and at least one of any_of); native=True refuses emulated support.",
    "requires_devices(n): skip unless at least n devices of the test's device type are present.",
    "requires_ranks(n): on a multi-process test class (MultiProcessTestCase, FSDPTest, "
    "DTensorTestBase...), skip unless the world it spawns has at least n ranks, on a device type "
    "with a process-group backend and, on an accelerator, n devices (unless "
    "PYTEST_DEVCAPS_DIST_SHARE_DEVICES=1); on the CPU the ranks share the device. Checked at setup.",
    "requires_memory(size, per_allocation=None, free=False): skip unless the device has at least "
    "size memory ('24GiB' = 24*2**30 bytes, '24GB' = 24*10**9), free memory at test time with "
    "free=True where the backend reports it, and per_allocation for the largest single allocation.",
    "dtypes(*dtypes, when=None): parametrize the dtype fixture; when={'cuda': (...), 'amd': (...)} "
    "gives a device type's or vendor's own list; dtypes the device lacks skip with the capability.",
    "skip_on(when, reason): skip where a condition over device facts holds "
    "(\"vendor == 'nvidia' and compute_capability < 9.0\"); the skip names the condition and facts.",
    "xfail_on(when, reason, strict=False, raises=None): expect failure where a condition over "
    "device facts holds.",
    "tolerance(dtype=None, atol, rtol, when=None): the tolerance the tolerances fixture gives for "
    "dtype on devices where when holds.",
    "hardware(cls): the hardware class of a test: generic, accelerator, or a device type or vendor; "
    "select with --devcaps-hardware.",
)

#: The devcaps markers, by name.
MARKER_NAMES = frozenset(line.split("(", 1)[0] for line in MARKER_LINES)

#: The marker checked against the world of a multi-process test's class (``marks/multiprocess.py``).
RANKS_MARKER = "requires_ranks"

#: The class a test with no declared class and no requirement gets, and the class attribute
#: PyTorch's device-generic test classes declare one with (``hw_classification =
#: HardwareClassification.ACCELERATOR``; a plain string works too).
GENERIC_CLASS = "generic"
ACCELERATOR_CLASS = "accelerator"
HARDWARE_ATTRIBUTE = "hw_classification"


def count_text(counts: Mapping[str, int]) -> str:
    """``generic 10, accelerator 3, cuda 1``: generic, accelerator, then the rest by name (here,
    not in ``marks/hardware``: every session's collection line is written with it)."""
    order = sorted(counts, key=lambda name: (name != GENERIC_CLASS, name != ACCELERATOR_CLASS, name))
    return ", ".join(f"{name} {counts[name]}" for name in order) or "no tests"

#: PyTorch's test-helper modules whose gates ``marks/pytorch_gates.py`` reads. A session reads
#: gates only when a collected module imported one of them: ``import torch`` itself loads other
#: ``torch.testing._internal`` modules (``common_dtype``, ``logging_tensor``, ``distributed.fake_pg``),
#: so their presence says nothing about the suite.
PYTORCH_GATE_MODULES = tuple(f"torch.testing._internal.{name}" for name in (
    "common_device_type", "common_distributed", "common_utils", "common_cuda", "inductor_utils",
    "triton_utils"))


def pytorch_gates_in_use() -> bool:
    """Whether a collected module imported a :data:`PYTORCH_GATE_MODULES` module (a few dict
    lookups: asked once per session, and per test by the unittest bridge)."""
    import sys

    return any(name in sys.modules for name in PYTORCH_GATE_MODULES)


#: Our device and dtype fixtures (the short names and the ``devcaps_`` ones that never clash).
DEVICE_NAMES = ("device", "devcaps_device")
DTYPE_NAMES = ("dtype", "devcaps_dtype")


def any_devcaps_mark(marks: Sequence[pytest.Mark]) -> bool:
    """Whether ``marks`` (a node's own, say) include a devcaps mark (a loop, not any(genexpr):
    asked for every test)."""
    for mark in marks:
        if mark.name in MARKER_NAMES:
            return True
    return False


def callspec_param(callspec: Any, names: tuple[str, ...]) -> Any:
    """The first of ``names`` a test's callspec has (its device or dtype parameter), else None."""
    params = getattr(callspec, "params", {})
    for name in names:  # a loop, not next(genexpr): asked for every test at collection and setup
        if name in params:
            return params[name]
    return None


def marks_key(marks: Sequence[pytest.Mark]) -> Hashable | None:
    """A hashable identity of ``marks`` by value (name, each argument with its type, keywords
    sorted), or None when an argument is unhashable (a list). Equal keys mean marks that read
    the same, so what they evaluate to on one device is computed once: each test's marks are
    objects of their own even where a whole suite writes the same ones. The types (a tuple's
    items' too) keep ``requires_devices(True)`` apart from ``requires_devices(1)``."""
    key = tuple([(m.name, tuple([_typed(a) for a in m.args]),
                  tuple(sorted((k, _typed(v)) for k, v in m.kwargs.items())) if m.kwargs else ())
                 for m in marks])
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _typed(value: Any) -> Any:
    """``value`` with its type, and a tuple's items each with theirs (``(1,) == (True,)``)."""
    if type(value) is tuple:
        return (tuple, tuple([_typed(v) for v in value]))
    return (type(value), value)


class InheritedMarks:
    """The devcaps marks a node sees, closest first (``node.iter_markers()`` of
    :data:`MARKER_NAMES`), with each parent's share (its own marks and its parents', as
    ``iter_markers`` walks them) read once for the tests of one module or class, not once per
    test. For one hook's loop over the collected tests, where nothing adds marks to a parent."""

    __slots__ = ("_shares", "_parents", "_last_parent", "_last_share")

    def __init__(self) -> None:
        # keyed by id(): a Node hashes through a Python __hash__ (its node id), once per test;
        # the parents are kept, so an id is not reused while the view lives
        self._shares: dict[int, tuple[pytest.Mark, ...]] = {}
        self._parents: list[Node] = []
        # the tests of one parent come one after another: the last parent's share is at hand
        self._last_parent: Node | None = None
        self._last_share: tuple[pytest.Mark, ...] = ()

    def __call__(self, node: Node) -> list[pytest.Mark]:
        own = node.own_markers
        marks = [m for m in own if m.name in MARKER_NAMES] if own else []
        share = self.share(node.parent)
        if share:
            marks.extend(share)
        return marks

    def share(self, parent: Node | None) -> tuple[pytest.Mark, ...]:
        """The devcaps marks ``parent`` passes down to its tests (its own and its parents'),
        closest first."""
        if parent is self._last_parent:
            return self._last_share
        if parent is None:
            return ()
        share = self._shares.get(id(parent))
        if share is None:
            share = self._shares[id(parent)] = tuple(m for m in parent.iter_markers() if m.name in MARKER_NAMES)
            self._parents.append(parent)
        self._last_parent, self._last_share = parent, share
        return share
