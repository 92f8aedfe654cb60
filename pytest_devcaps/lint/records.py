"""Plain records of the lint: where (``Span``), what was found (``Finding``), what a gate protects
(``Need``) and what ``--fix`` will do (the ``Edit`` kinds the codemod applies).

Positions are 1-based lines and 0-based *character* columns (LibCST counts characters; the
finder converts ``ast``'s UTF-8 byte offsets), so a span found by ``ast`` names the same node
in LibCST's tree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypeVar, Union

Hardware = Literal["generic", "accelerator", "cuda", "nvidia", "amd"]
T = TypeVar("T")


@dataclass(frozen=True, order=True)
class Span:
    line: int
    col: int
    end_line: int
    end_col: int


@dataclass(frozen=True)
class Finding:
    """One hardcoded device check: ``path:line:col: CODE message (use: advice)``.

    ``fix`` says what ``--fix`` does about it (None: left for a person, ``message`` says why);
    ``hardware`` is what the finding says about the hardware the file's tests need.
    """

    path: str
    line: int
    column: int
    code: str
    message: str
    use: str
    fix: str | None = None
    hardware: Hardware | None = None

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.column}: {self.code} {self.message} (use: {self.use})"

    @property
    def fixable(self) -> bool:
        return self.fix is not None


@dataclass(frozen=True)
class Need:
    """What a test needs to run, in the plugin's terms, or why it cannot be said (``blockers``).

    ``accelerator`` is a bare "needs CUDA/a GPU": it becomes the ``device`` fixture, not a mark.
    ``qualifier`` marks a "not on CUDA" condition that only narrows another one (dropped in an
    ``or`` next to a capability: the registry answers for every device).
    """

    capabilities: tuple[str, ...] = ()
    any_of: tuple[tuple[str, ...], ...] = ()
    devices: int = 0
    memory: str | None = None
    accelerator: bool = False
    qualifier: bool = False
    blockers: tuple[str, ...] = ()
    hardware: Hardware | None = None
    native: bool = False  # the hardware must do it (an sm_89 fp8 gate), emulation does not count
    # the device types an availability gate names (TEST_CUDA: cuda; torch.xpu.is_available(): xpu);
    # () where it says "any accelerator". Two or more is a set the author chose (TEST_CUDA or
    # TEST_XPU): it is kept, never widened to every accelerator.
    vendors: tuple[str, ...] = ()
    # ranks a multi-process test's world needs (skip_if_lt_x_gpu(n) on a MultiProcessTestCase):
    # n ranks and a process-group backend for the device, which on the CPU share the device
    ranks: int = 0

    def __and__(self, other: Need) -> Need:
        return Need(
            capabilities=_unique(self.capabilities + other.capabilities),
            any_of=_unique(self.any_of + other.any_of),
            devices=max(self.devices, other.devices),
            memory=self.memory or other.memory,
            accelerator=self.accelerator or other.accelerator,
            blockers=_unique(self.blockers + other.blockers),
            hardware=_stricter(self.hardware, other.hardware),
            native=self.native or other.native,
            vendors=tuple(sorted(set(self.vendors) | set(other.vendors))),
            ranks=max(self.ranks, other.ranks),
        )

    @property
    def marks(self) -> bool:
        """True when the need becomes at least one mark."""
        return bool(self.capabilities or self.any_of or self.devices > 1 or self.memory or self.ranks)

    @property
    def convertible(self) -> bool:
        return not self.blockers and not self.qualifier

    def render(self, prefix: str = "pytest.mark.") -> tuple[str, ...]:
        """The marks (decorator expressions, without ``@``) for this need; ``prefix`` "" gives
        pytest_devcaps' decorators of the same names (they also work under unittest)."""
        marks: list[str] = []
        groups = list(self.any_of)
        if self.capabilities or groups:
            args = [_quote(c) for c in self.capabilities]
            if groups:
                args.append("any_of=[" + ", ".join(_quote(c) for c in groups.pop(0)) + "]")
            if self.native:
                args.append("native=True")
            marks.append(f"{prefix}requires_capability({', '.join(args)})")
        marks.extend(f"{prefix}requires_capability(any_of=[" + ", ".join(_quote(c) for c in g) + "])"
                     for g in groups)
        if self.devices > 1:
            marks.append(f"{prefix}requires_devices({self.devices})")
        if self.ranks:
            marks.append(f"{prefix}requires_ranks({self.ranks})")
        if self.memory:
            marks.append(f"{prefix}requires_memory({_quote(self.memory)})")
        return tuple(marks)


NOTHING = Need()

_ORDER: dict[str | None, int] = {None: 0, "generic": 0, "accelerator": 1, "cuda": 2, "nvidia": 3, "amd": 3}


def _stricter(a: Hardware | None, b: Hardware | None) -> Hardware | None:
    if {a, b} == {"nvidia", "amd"}:
        return "cuda"
    return a if _ORDER[a] >= _ORDER[b] else b


def join_hardware(hints: list[Hardware | None]) -> Hardware:
    """The classification a file's tests need, from its findings' hints (strictest wins;
    an NVIDIA-only and a ROCm-only gate together still need the ``cuda`` device type)."""
    result: Hardware | None = None
    for hint in hints:
        result = _stricter(result, hint)
    return result or "generic"


def explains(hint: Hardware | None, result: Hardware) -> bool:
    """True when a finding with ``hint`` is one reason the file is classified ``result``: its hint
    is that class, or stricter (an NVIDIA-only or ROCm-only gate explains ``cuda``)."""
    return hint is not None and hint != "generic" and _ORDER[hint] >= _ORDER[result]


def _unique(items: tuple[T, ...]) -> tuple[T, ...]:
    return tuple(dict.fromkeys(items))


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


ScopeKey = tuple[str, int]
"""A function or class: (name, line of its ``def``/``class`` keyword)."""


VALUE = "{value}"


@dataclass(frozen=True)
class ReplaceExpr:
    """Replace the expression at ``span`` (a LibCST node of class ``node``) with ``code``; in an
    attribute (``x.is_cuda``), ``{value}`` in ``code`` stands for ``x`` as rewritten."""

    span: Span
    node: str
    code: str


@dataclass(frozen=True)
class ReplaceDecorator:
    """Replace the decorator whose expression is at ``span`` by these decorators (none: drop it)."""

    span: Span
    decorators: tuple[str, ...]


@dataclass(frozen=True)
class ReplaceStatement:
    """Replace the statement at ``span`` by ``code`` (empty: remove it)."""

    span: Span
    code: str


@dataclass(frozen=True)
class AddMarks:
    """Marks the body of ``scope`` needs (merged per scope, added as its outermost decorators)."""

    scope: ScopeKey
    need: Need
    decorators: tuple[str, ...] | None = None  # as written (None: the need rendered with ``prefix``)
    prefix: str = "pytest.mark."  # "": pytest_devcaps' decorators (they work under unittest too)


@dataclass(frozen=True)
class AddParameter:
    """Give ``scope`` a parameter (a fixture for tests; keyword-only for helpers)."""

    scope: ScopeKey
    name: str
    keyword_only: bool = False


@dataclass(frozen=True)
class DropDefault:
    """Drop the default of parameter ``name`` of ``scope`` (``device="cuda"`` -> the fixture)."""

    scope: ScopeKey
    name: str


@dataclass(frozen=True)
class EditCall:
    """Edit the call at ``span`` in place (what is inside keeps its own edits): replace the called
    expression (``func``) or rename its attribute (``method``: ``x.cuda`` -> ``x.to``), replace
    the positional arguments (``args``), insert positional arguments first (``prepend``), add
    keyword arguments it lacks (``keywords``)."""

    span: Span
    func: str | None = None
    method: str | None = None
    args: tuple[str, ...] | None = None
    prepend: tuple[str, ...] = ()
    keywords: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class RemoveUnusedImport:
    """``from module import name`` may be unused after the rewrite; drop it only if it is."""

    module: str
    name: str  # "": ``import module as asname``
    asname: str | None = None


@dataclass(frozen=True)
class EnsureDeviceType:
    """The file needs one module-level ``device_type`` (the accelerator's type, else "cpu"),
    added after its imports unless the module already binds that name."""


@dataclass(frozen=True)
class Relayout:
    """Lay a test class out as PyTorch's TEST_LINTER accepts (``--target torch`` with
    HardwareClassification): ``layout`` is a :class:`pytest_devcaps.lint.layout.ClassLayout`,
    applied after every other edit (by class name)."""

    layout: object


Edit = Union[ReplaceExpr, ReplaceDecorator, ReplaceStatement, AddMarks, AddParameter, DropDefault,
             EditCall, RemoveUnusedImport, EnsureDeviceType, Relayout]

Target = Literal["devcaps", "torch"]
TARGETS: tuple[Target, ...] = ("devcaps", "torch")


@dataclass(frozen=True)
class Analysis:
    """One file: its findings (sorted, suppressions applied) and the edits ``--fix`` would make."""

    path: str
    findings: tuple[Finding, ...]
    edits: tuple[Edit, ...] = field(default=())
    readable: bool = True
