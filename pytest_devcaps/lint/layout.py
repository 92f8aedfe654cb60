"""``--target torch`` with a torch that has ``HardwareClassification`` (2.14+): the layout
PyTorch's ``TEST_LINTER`` accepts (``tools/linter/adapters/test_linter.py`` in PyTorch main), the
campaign's own pattern (issue 185590):

- every class with ``test_*`` methods declares ``hw_classification = HardwareClassification.X``;
- ``GENERIC``: not instantiated, no test takes ``device``: tests with no device code, and the
  tests of multi-process classes (they run on the module's ``device_type``, whatever it is);
- ``ACCELERATOR``: instantiated by ``instantiate_device_type_tests`` with ``except_for="cpu"``,
  every test takes ``device``: tests the rewrite made device-generic (their gate rewritten, their
  device code converted);
- ``CUDA``: instantiated with exactly ``only_for="cuda"``, every test takes ``device``: tests that
  keep CUDA-only code or a gate that stays.

A class whose tests are of one kind is classified as it is; a mixed class is split, its other
members (setUp, helpers, attributes) moving to a mixin base the new classes share, so no test is
lost or run twice. What cannot be laid out so (a class subclassed in the file, ``super(C,
self)``, an ``only_for`` with several device types, an ``@only*`` decorator an accelerator class
may not carry) stays as it is, with a ``DC013`` finding saying what a person must decide.

This module decides (on ``ast``, from the analysis' findings); ``relayout`` writes it.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal

from pytest_devcaps.lint.records import Finding, Span
from pytest_devcaps.lint.regions import within

Kind = Literal["generic", "accelerator", "cuda"]
CLASSIFICATION: dict[Kind, str] = {"generic": "GENERIC", "accelerator": "ACCELERATOR", "cuda": "CUDA"}
SUFFIX: dict[Kind, str] = {"generic": "", "accelerator": "Device", "cuda": "CudaSpecific"}
INSTANTIATE: dict[Kind, str] = {"accelerator": 'except_for="cpu"', "cuda": 'only_for="cuda"'}
ATTRIBUTE = "hw_classification"
MULTIPROCESS_BASES = ("MultiProcessTestCase", "MultiThreadedTestCase", "FSDPTest", "FSDPTestMultiThread",
                      "DTensorTestBase", "DTensorOpTestBase", "MultiProcContinuousTest", "DistributedTestBase")
ALLOWED_ONLY = "onlyAccelerator"


@functools.lru_cache(maxsize=1)
def available() -> bool:
    """The installed torch has ``common_utils.HardwareClassification`` (read from its source,
    without importing torch)."""
    return "class HardwareClassification(" in torch_testing_source("common_utils.py")


@functools.lru_cache(maxsize=8)
def torch_testing_source(name: str) -> str:
    """The source of the installed torch's ``torch/testing/_internal/<name>`` ("" where there is
    none), read once, without importing torch."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return ""
    if spec is None or spec.origin is None:
        return ""
    try:
        return (Path(spec.origin).parent / "testing" / "_internal" / name).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def installed_torch() -> str:
    """The installed torch's version, read from its ``version.py`` (no import)."""
    try:
        spec = importlib.util.find_spec("torch")
        text = (Path(spec.origin).parent / "version.py").read_text() if spec and spec.origin else ""
    except (ImportError, ValueError, OSError):
        return "not installed"
    for line in text.splitlines():
        if line.startswith("__version__"):
            return line.split("=", 1)[1].strip().strip("'\"")
    return "unknown"


@dataclass(frozen=True)
class ClassLayout:
    """How one test class is laid out: ``groups`` maps each kind to its tests (by name), in the
    class's order; ``instantiated``: the file already instantiates it (with ``only_for``, if any)."""

    name: str
    line: int
    groups: tuple[tuple[Kind, tuple[str, ...]], ...]
    instantiated: bool = False
    device_tests: tuple[str, ...] = ()  # tests that must take ``device`` (an instantiated class's)

    @property
    def kinds(self) -> tuple[Kind, ...]:
        return tuple(kind for kind, tests in self.groups if tests)

    def describe(self) -> str:
        if len(self.kinds) == 1:
            return f"hw_classification {CLASSIFICATION[self.kinds[0]]}"
        parts = [f"{self.name}{SUFFIX[k]} ({CLASSIFICATION[k]}, {len(t)} test{'s' if len(t) != 1 else ''})"
                 for k, t in self.groups if t]
        return "split into " + ", ".join(parts)


@dataclass(frozen=True)
class Decision:
    """A test class's layout, or why a person must decide (``why``)."""

    cls: ast.ClassDef
    layout: ClassLayout | None
    why: str | None = None


def test_classes(tree: ast.Module) -> list[ast.ClassDef]:
    """Top-level classes with ``test_*`` methods, as TEST_LINTER finds them."""
    return [s for s in tree.body if isinstance(s, ast.ClassDef) and any(
        isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and m.name.startswith("test_") for m in s.body)]


def classified(cls: ast.ClassDef) -> bool:
    return any(isinstance(s, (ast.Assign, ast.AnnAssign)) and any(
        isinstance(t, ast.Name) and t.id == ATTRIBUTE
        for t in (s.targets if isinstance(s, ast.Assign) else [s.target])) for s in cls.body)


def _instantiation(tree: ast.Module, name: str) -> ast.Call | None:
    for statement in tree.body:
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
            call = statement.value
            func = call.func
            if (func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")) == "instantiate_device_type_tests" \
                    and call.args and isinstance(call.args[0], ast.Name) and call.args[0].id == name:
                return call
    return None


def _only_for(call: ast.Call) -> list[str] | None:
    for keyword in call.keywords:
        if keyword.arg == "only_for":
            value = keyword.value
            values = value.elts if isinstance(value, (ast.Tuple, ast.List)) else [value]
            return [v.value for v in values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
    return None


def _span_of(source_span: Span, node: ast.FunctionDef | ast.AsyncFunctionDef) -> Span:
    first = min((d.lineno for d in node.decorator_list), default=node.lineno)
    return Span(first, 0, source_span.end_line, source_span.end_col)


@dataclass(frozen=True)
class Evidence:
    """What the analysis knows of a file's code: ``held`` regions (kept gates that restrict the
    code to CUDA), ``residue`` (CUDA-only code left), the findings (fixed or left)."""

    held: tuple[Span, ...]
    residue: tuple[Span, ...]
    findings: tuple[Finding, ...]
    device_code: tuple[Span, ...] = ()  # converted code already there (device_type, torch.accelerator)

    @property
    def fixed_lines(self) -> frozenset[int]:
        """The lines of the findings the rewrite fixes."""
        return frozenset(f.line for f in self.findings if f.fixable)

    def kind(self, span: Span) -> Kind:
        """cuda: held by a gate that stays, or keeping CUDA-only code; accelerator: the rewrite
        changed its device code or its gate; generic: neither."""
        if any(within(span, h) for h in self.held) or any(within(r, span) for r in self.residue):
            return "cuda"
        inside = [f for f in self.findings if within(Span(f.line, f.column - 1, f.line, f.column - 1), span)]
        converted = any(within(d, span) for d in self.device_code)  # a file --fix already went over
        return "accelerator" if converted or any(f.fixable for f in inside) else "generic"


DEVICE_CODE_NAMES = frozenset({"device_type", "accelerator", "get_device_module", ALLOWED_ONLY})


def device_code(tree: ast.Module, span_of: Callable[[ast.AST], Span]) -> tuple[Span, ...]:
    """Where converted device code reads the device: ``device_type``, ``torch.accelerator``,
    ``torch.get_device_module``: a test that has it is an accelerator test on every later read."""
    return tuple(span_of(n) for n in ast.walk(tree)
                 if (isinstance(n, ast.Name) and n.id in DEVICE_CODE_NAMES and isinstance(n.ctx, ast.Load))
                 or (isinstance(n, ast.Attribute) and n.attr in DEVICE_CODE_NAMES))


def _decorator_names(node: ast.FunctionDef | ast.AsyncFunctionDef, fixed_lines: frozenset[int] = frozenset()) -> list[str]:
    """The names of ``node``'s decorators, less those on ``fixed_lines`` (the rewrite replaces
    them: ``@onlyCUDA`` becomes ``@onlyAccelerator``)."""
    names = []
    for decorator in node.decorator_list:
        if decorator.lineno in fixed_lines:
            continue
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        names.append(target.id if isinstance(target, ast.Name) else getattr(target, "attr", ""))
    return names


def _blocker(tree: ast.Module, cls: ast.ClassDef) -> str | None:
    """Why ``cls`` cannot be split: a subclass in the file, ``super(Cls, self)`` in it."""
    for other in tree.body:
        if isinstance(other, ast.ClassDef) and any(isinstance(b, ast.Name) and b.id == cls.name for b in other.bases):
            return f"{other.name} (line {other.lineno}) subclasses it"
    for node in ast.walk(cls):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super" and node.args:
            return f"super({ast.unparse(node.args[0])}, ...) on line {node.lineno} names the class"
    return None


def plan(tree: ast.Module, spans: dict[int, Span], evidence: Evidence) -> list[Decision]:
    """The layout of every unclassified test class of a file the rewrite touches. ``spans``:
    the span of each method node (``id(node)``), as the analysis measured them."""
    classes = test_classes(tree)
    touched = any(f.code not in ("DC000", "DC013") for f in evidence.findings) or any(classified(c) for c in classes) \
        or bool(evidence.device_code)  # a file --fix went over: its classes are laid out (or DC013) on every read
    if not touched:  # a file the rewrite leaves alone, and never migrated
        return []
    return [_decide(tree, cls, spans, evidence) for cls in classes if not classified(cls)]


def _decide(tree: ast.Module, cls: ast.ClassDef, spans: dict[int, Span], evidence: Evidence) -> Decision:
    tests = [m for m in cls.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and m.name.startswith("test_")]
    multiprocess = any((b.id if isinstance(b, ast.Name) else getattr(b, "attr", "")) in MULTIPROCESS_BASES
                       for b in cls.bases)
    kinds: dict[str, Kind] = {}
    for test in tests:
        kind = evidence.kind(_span_of(spans[id(test)], test))
        kinds[test.name] = "generic" if kind == "accelerator" and multiprocess else kind
    call = _instantiation(tree, cls.name)
    if call is not None:
        return _decide_instantiated(cls, call, tests, kinds, evidence)
    groups = tuple((k, tuple(t.name for t in tests if kinds[t.name] == k)) for k in ("generic", "accelerator", "cuda"))
    layout = ClassLayout(cls.name, cls.lineno, groups)  # type: ignore[arg-type]
    if len(layout.kinds) > 1:
        blocked = _blocker(tree, cls)
        if blocked is not None:
            return Decision(cls, None, f"its tests are of {len(layout.kinds)} kinds, and it cannot be split: {blocked}")
    if "accelerator" in layout.kinds:
        only = [(t.name, n) for t in tests if kinds[t.name] == "accelerator"
                for n in _decorator_names(t, evidence.fixed_lines) if n.startswith("only") and n != ALLOWED_ONLY]
        if only:
            return Decision(cls, None, f"@{only[0][1]} on {only[0][0]}: an ACCELERATOR class takes no @only* "
                                       "but @onlyAccelerator")
    return Decision(cls, layout)


def _widened(call: ast.Call, evidence: Evidence) -> bool:
    """The rewrite changes the instantiation's ``only_for`` (``only_for=("cuda",)`` becomes
    ``except_for="cpu"``): a finding in the call that is fixed."""
    span = Span(call.lineno, call.col_offset, call.end_lineno or call.lineno, call.end_col_offset or 0)
    return any(f.fixable and within(Span(f.line, f.column - 1, f.line, f.column - 1), span) for f in evidence.findings)


def _decide_instantiated(cls: ast.ClassDef, call: ast.Call, tests: list[ast.FunctionDef | ast.AsyncFunctionDef],
                         kinds: dict[str, Kind], evidence: Evidence) -> Decision:
    """The class of an instantiated class: ``CUDA`` where it stays ``only_for="cuda"``,
    ``ACCELERATOR`` where it has no ``only_for`` or the rewrite widens it."""
    only = None if _widened(call, evidence) else _only_for(call)
    params = {t.name: {a.arg for a in (*t.args.args, *t.args.kwonlyargs)} for t in tests}
    bare = tuple(t.name for t in tests if not params[t.name] & {"device", "devices"})
    if only is not None and only != ["cuda"]:
        return Decision(cls, None, f"only_for={only!r}: a device-specific class names one device type; "
                                   "a person decides which class these tests are")
    kind: Kind = "cuda" if only == ["cuda"] else "accelerator"
    if kind == "accelerator":
        stray = [(t.name, n) for t in tests for n in _decorator_names(t, evidence.fixed_lines)
                 if n.startswith("only") and n != ALLOWED_ONLY]
        if stray:
            return Decision(cls, None, f"@{stray[0][1]} on {stray[0][0]}: an ACCELERATOR class takes no @only* "
                                       "but @onlyAccelerator; move the test to a class of its device type")
    return Decision(cls, ClassLayout(cls.name, cls.lineno, ((kind, tuple(t.name for t in tests)),),
                                     instantiated=True, device_tests=bare))
