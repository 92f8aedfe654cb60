"""The finder's working records: an ``Item`` is a finding with the edits that fix it; a
``Construct`` is one gate (a skip decorator, an in-test skip, a module ``pytestmark``) whose
atoms are fixed together, decided once the whole file has been read (:func:`decide`): a bare
"needs CUDA" is dropped where the tests take the device fixture, becomes a
``torch.accelerator`` skip elsewhere, and is kept while other code in the file still needs CUDA.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field, replace
from typing import Literal

from pytest_devcaps.lint.records import (
    AddMarks, Edit, Finding, Hardware, Need, RemoveUnusedImport, ReplaceDecorator, ReplaceExpr, ReplaceStatement,
    ScopeKey, Span, _quote,
)
from pytest_devcaps.lint import rules
from pytest_devcaps.lint.rules import ACCELERATOR_AVAILABLE

ACCELERATOR_SKIP = {
    "pytest": f'pytest.mark.skipif(not {ACCELERATOR_AVAILABLE}, reason="needs an accelerator")',
    "unittest": f'unittest.skipIf(not {ACCELERATOR_AVAILABLE}, "needs an accelerator")',
}


@dataclass(frozen=True)
class Residue:
    """Code that stays CUDA-only after the rewrite (a finding left unfixed, a CUDA-only library
    call), or that needs an accelerator (FSDP1 with no ``device_id``): a gate whose region holds
    one is kept."""

    span: Span
    what: str
    only: str = "CUDA-only"  # what the code is: "CUDA-only", "accelerator-only"


@dataclass
class Item:
    span: Span
    code: str
    message: str
    use: str
    hardware: Hardware | None
    edits: list[Edit] = field(default_factory=list)
    fix: str | None = None
    blocks_cpu: bool = False
    construct: Construct | None = None
    suppressed: bool = False
    why: str | None = None  # why it is left, when it is
    helper: str | None = None  # the module-level helper function it is in
    held: str | None = None  # why a kept gate holds it as it is (None: its own ``why`` says)
    frozen: bool = False  # held as it is by a kept gate, whatever its own fix was

    @property
    def residue(self) -> Residue | None:
        """This finding as CUDA-only code left behind (None: fixed, or harmless off CUDA)."""
        if not self.blocks_cpu or (self.fix is not None and not self.suppressed):
            return None
        return Residue(self.span, self.code + (" " + self.label if self.label else ""))

    @property
    def label(self) -> str:
        """The code the finding quotes (``torch.cuda.Stream()``), shortened."""
        match = re.search(r"`[^`]{1,60}`", self.message)
        return match.group(0) if match else ""

    def hold(self, why: str) -> None:
        """Leave this finding as it is: a kept gate holds its code (its own reason, where it
        had one for staying, is the one it gives)."""
        if self.fix is not None or not self.why:
            self.held = why
        self.frozen = True
        self.fix = None
        self.edits.clear()

    def fixed(self, fix: str, *edits: Edit) -> Item:
        self.fix = fix
        self.edits.extend(edits)
        return self

    def finding(self, path: str) -> Finding:
        why = self.held or self.why
        message = self.message if self.fix is not None or not why else f"{self.message}; not fixed: {why}"
        return Finding(path, self.span.line, self.span.col + 1, self.code, message, self.use, self.fix,
                       self.hardware)


@dataclass
class Construct:
    """A gate: ``span`` is the decorator expression, the statement, or the ``pytestmark`` value."""

    kind: Literal["decorator", "statement", "module_statement", "mark_value", "expr"]
    span: Span
    need: Need
    scope: ScopeKey | None
    device_fixture: bool
    style: Literal["pytest", "unittest"]
    items: list[Item] = field(default_factory=list)
    keep: str | None = None
    skip_source: str = ""
    empty_body: bool = False
    statement: Span | None = None
    has_pytestmark: bool = False
    node_class: str = ""
    imported: list[tuple[str, str]] = field(default_factory=list)
    target: str = "devcaps"
    # what the gate guards (lint.regions): ``anchor`` is the node it sits on (a function, a class,
    # None: the module), ``guard`` the ``if`` whose condition it is (a gate in code); ``region``
    # is everything that runs through it (the anchor, its fixtures, setUp, the helpers it
    # calls), ``anchors`` the anchor alone (None: the whole file). Set by ``analyze``.
    anchor: ast.AST | None = None
    guard: ast.If | None = None
    region: tuple[Span, ...] | None = None
    anchors: tuple[Span, ...] | None = None
    reason: str | None = None  # the skip's reason text, as the author wrote it
    # an in-test skip of a TestCase method: its condition (span, ast class), and whether only
    # docstrings and other skips come before it (then marks may move to the method)
    condition: tuple[Span, str] | None = None
    leading: bool = False
    # kept, but not CUDA's: it acts per device type or counts every accelerator (the code it
    # guards is rewritten as any other)
    generic: bool = False
    replacement: tuple[str, ...] | None = None  # the decorators it becomes (None: from its need)
    # kept as written on a multi-process test: its class's world_size stays too (a CUDA count
    # there is what keeps the ranks off a device the gate would not let in)
    holds_world_size: bool = False
    # the device types it is rewritten to keep (``TEST_CUDA or TEST_XPU``: cuda, xpu), None: none
    kept_types: tuple[str, ...] | None = None
    # where it skips, over device facts, when that is exactly what it checks and it only takes
    # devices away (``skip_if_rocm``: vendor == 'amd'): rewritten as skip_on of that condition
    skip_when: str | None = None

    @property
    def restricts(self) -> bool:
        """Holding, the gate lets the code it guards run on CUDA (or some accelerators) only:
        kept, it keeps that code off every other device (an exclusion such as skipIfRocm runs
        it everywhere else, and restricts nothing)."""
        need = self.need
        return not self.generic and bool(need.accelerator or need.marks or
                                         need.hardware in ("accelerator", "cuda", "nvidia", "amd"))

    def own(self, item: Item) -> Item:
        item.construct = self
        self.items.append(item)
        return item

    def note_imports(self, node: ast.AST, imports: dict[str, str]) -> None:
        """Names ``node`` uses that the module imports: unused once the gate is rewritten."""
        for child in ast.walk(node):
            if isinstance(child, ast.Name) and child.id in imports:
                self.imported.append((imports[child.id], child.id))


def _why_kept(construct: Construct, residue: Residue | None) -> str | None:
    need = construct.need
    if construct.keep:
        return construct.keep
    if _says_its_exclusion(construct):
        return None  # what no mark of a capability says exactly: the condition itself, per device
    if construct.skip_when is not None and construct.kind == "module_statement" and construct.target == "devcaps":
        return (f"a module-level skip (where {construct.skip_when}) also keeps the rest of the module from "
                "being imported there; as pytestmark = skip_on(...) it would be: a person decides")
    if need.blockers:
        return need.blockers[0]
    if need.qualifier:
        return "it only says where CUDA is absent"
    if need.accelerator and len(need.vendors) > 1:
        if _says_its_set(construct):
            construct.kept_types = need.vendors
            return None
        return (f"it names the device types {', '.join(need.vendors)}: that set is the author's; "
                "a person decides whether every accelerator runs it")
    if construct.reason and not (need.capabilities or need.any_of or need.memory) and \
            rules.vendor_specific(construct.reason):
        construct.need = replace(need, hardware="cuda")
        return (f"its reason says the test is vendor-specific ({construct.reason!r}): a person decides "
                "whether other accelerators run it")
    if residue is not None and (need.accelerator or need.marks):
        return f"line {residue.span.line} is {residue.only} ({residue.what}); while it stays, so does the gate"
    if need.accelerator and not construct.device_fixture and construct.kind == "statement" \
            and construct.condition is None:
        return "an in-test skip outside a pytest test; keep it"
    if construct.condition is not None and need.marks and not construct.leading:
        return ("a skip after other code in a TestCase method: as a decorator it would also stop that "
                "code running where the test skips; move it to the top (or to a decorator) by hand")
    return None


def _says_its_set(construct: Construct) -> bool:
    """A gate on a set of device types (``TEST_CUDA or TEST_XPU``, ``require_cuda_or_xpu``) that
    asks for nothing else is rewritten to that set, as a ``skip_on`` over the test device's type
    (``--target devcaps``: torch has no mark for it): it runs where it ran, and nowhere more, so
    CUDA-only code it guards changes nothing (on XPU it ran, and failed, before too)."""
    need = construct.need
    return construct.target == "devcaps" and construct.kind in ("decorator", "mark_value") \
        and construct.replacement is None and not (need.marks or need.blockers or need.qualifier)


def _says_its_exclusion(construct: Construct) -> bool:
    """A gate that only takes devices away (a ROCm exclusion, an architecture floor on CUDA
    devices) and whose condition the device facts say exactly is rewritten as ``skip_on`` of
    that condition (``--target devcaps``; torch has no such mark): the same devices skip, the
    rest run as before, so CUDA-only code behind it changes nothing."""
    need = construct.need
    return construct.skip_when is not None and construct.target == "devcaps" \
        and construct.kind in ("decorator", "mark_value") and construct.replacement is None \
        and bool(need.blockers or need.qualifier)  # else a capability says it (sm_89: fp8)


def exclusion_mark(construct: Construct) -> str:
    """``pytest.mark.skip_on("vendor == 'amd'", reason=...)`` (the decorator of the same name in
    a unittest class), the author's reason kept, else naming the gate it replaces."""
    gate = construct.items[0].label.strip("`") if construct.items else "the gate"
    reason = construct.reason or f"where {gate} skipped"
    prefix = "" if construct.style == "unittest" and construct.kind == "decorator" else "pytest.mark."
    return f"{prefix}skip_on({_quote(construct.skip_when or '')}, reason={_quote(reason)})"


def kept_types_mark(construct: Construct) -> str:
    """``pytest.mark.skip_on("type not in ('cuda', 'xpu')", reason=...)`` (the decorator of the
    same name in a unittest class), the author's reason kept."""
    types = construct.kept_types or ()
    when = f"type != {types[0]!r}" if len(types) == 1 else f"type not in ({', '.join(map(repr, types))})"
    reason = construct.reason or f"runs on {' or '.join(types)} devices only"
    prefix = "" if construct.style == "unittest" and construct.kind == "decorator" else "pytest.mark."
    return f'{prefix}skip_on("{when}", reason={_quote(reason)})'


def decide(construct: Construct, residue: Residue | None) -> str | None:
    """Give the construct's atoms their edit (on the first) or say why they stay (returned)."""
    if construct.keep == "fixed":
        return None
    why = _why_kept(construct, residue)
    edits: list[Edit] = []
    if why is None:
        edits, why = _edits(construct)
    head = construct.items[0]
    if why is not None:
        for item in construct.items:
            item.why = why
            item.hardware = construct.need.hardware or item.hardware
            item.fix = None
            item.edits.clear()
        return why
    marks = construct.need.render()
    what = ("@" + ", @".join(marks)) if marks else "nothing (the device fixture runs the test on every device)"
    if construct.replacement is not None:
        what = "@" + ", @".join(construct.replacement) + " (widens the test from CUDA to every accelerator)"
    elif construct.kept_types:
        what = (f"@{kept_types_mark(construct)} (the author's device types {', '.join(construct.kept_types)}, "
                "kept: a person may widen it to every accelerator)")
    elif _says_its_exclusion(construct):
        what = f"@{exclusion_mark(construct)} (the devices it skipped, per device; the others run as before)"
        for item in construct.items:
            item.hardware = None  # an exclusion says nothing of the hardware the test is for
    elif construct.kind == "expr":
        what = ACCELERATOR_AVAILABLE
    elif construct.need.accelerator and not construct.device_fixture and not marks:
        what = "an accelerator check (torch.accelerator.is_available())"
    edits.extend(RemoveUnusedImport(module, name) for module, name in construct.imported)
    head.fixed(f"replaced by {what}", *edits)
    for item in construct.items[1:]:
        item.fix = f"fixed with line {head.span.line}"
    return None


# The runtime capabilities --target torch may say as "needs an accelerator": those torch's own
# device-generic API has (torch 2.13): streams and events (torch/accelerator/__init__.py:
# current_stream, set_stream, synchronize; torch.Stream and torch.Event take any device type)
# and allocator statistics (torch/accelerator/memory.py: memory_stats, max_memory_allocated,
# reset_peak_memory_stats, get_memory_info), the twins the rewrite calls. Not graphs: a test
# gated on TEST_CUDA_GRAPH captures a graph, which MPS and a PrivateUse1 backend without a graph
# implementation cannot (emu answers runtime.graphs unsupported; test/dynamo/test_cudagraphs.py
# failed there once widened), nor pinned memory (a host allocator the backend must register):
# a gate asking for those stays under --target torch.
EVERY_ACCELERATORS_RUNTIME = frozenset({"runtime.streams", "runtime.events", "runtime.memory_stats"})


def mark_decorators(need: Need, unittest_style: bool, target: str) -> tuple[str, ...] | None:
    """The decorators that say ``need`` in ``target``'s vocabulary (None: it has none).
    ``--target torch``: only what torch 2.13 provides (an accelerator check for the runtime
    capabilities of :data:`EVERY_ACCELERATORS_RUNTIME`, and one on
    torch.accelerator.device_count() for a device count: common_distributed.skip_if_lt_x_gpu would
    do in a MultiProcessTestCase only, since elsewhere it ends the process with sys.exit(77)
    instead of skipping)."""
    if target == "devcaps":
        return need.render("" if unittest_style else "pytest.mark.")
    if need.any_of or need.memory or need.ranks or any(c not in EVERY_ACCELERATORS_RUNTIME for c in need.capabilities):
        return None
    skip = "unittest.skipIf({}, {})" if unittest_style else "pytest.mark.skipif({}, reason={})"
    marks = [skip.format(f"not {ACCELERATOR_AVAILABLE}", '"needs an accelerator"')] if need.capabilities else []
    if need.devices > 1:
        marks.append(skip.format(f"torch.accelerator.device_count() < {need.devices}",
                                 f'"needs {need.devices} accelerators"'))
    return tuple(marks)


def _render(construct: Construct, need: Need) -> tuple[list[str], str | None]:
    """The decorators/marks for ``need`` in the construct's style and target, or why none."""
    if construct.target == "devcaps":
        return list(need.render("" if construct.style == "unittest" and construct.kind == "decorator"
                                else "pytest.mark.")), None
    found = mark_decorators(need, construct.style == "unittest", "torch")
    if found is None:
        wanted = ", ".join(need.render(""))
        return [], (f"torch 2.13 has no decorator for {wanted}: keep the gate, or convert with "
                    "--target devcaps")
    return list(found), None


def _edits(construct: Construct) -> tuple[list[Edit], str | None]:
    need = replace(construct.need, accelerator=False)
    marks, why = _render(construct, need)
    if why is None and marks and construct.target == "torch" and construct.kind in ("module_statement", "mark_value"):
        why = "pytestmark takes pytest marks, and torch 2.13 has none for this: convert with --target devcaps"
    if why is not None:
        return [], why
    # A capability, device count or memory mark is asked of the test's device: it already
    # says "not this device" wherever the plain "needs CUDA" would have.
    accelerator = construct.need.accelerator and not construct.device_fixture and not marks
    if construct.kind == "expr":
        return [ReplaceExpr(construct.span, construct.node_class, ACCELERATOR_AVAILABLE)], None
    if construct.replacement is not None:
        return [ReplaceDecorator(construct.span, construct.replacement)], None
    if construct.kept_types:
        if construct.kind == "decorator":
            return [ReplaceDecorator(construct.span, (kept_types_mark(construct),))], None
        return _module_edits(construct, [kept_types_mark(construct)], False)
    if _says_its_exclusion(construct):
        if construct.kind == "decorator":
            return [ReplaceDecorator(construct.span, (exclusion_mark(construct),))], None
        return _module_edits(construct, [exclusion_mark(construct)], False)
    if construct.kind == "decorator":
        extra = [ACCELERATOR_SKIP[construct.style]] if accelerator else []
        return [ReplaceDecorator(construct.span, tuple(marks + extra))], None
    if construct.kind == "statement":
        return _statement_edits(construct, need, marks, accelerator), None
    return _module_edits(construct, marks, accelerator)


def _statement_edits(construct: Construct, need: Need, marks: list[str], accelerator: bool) -> list[Edit]:
    """An in-test skip: its marks go on the test and the statement goes; a TestCase method's
    plain "needs CUDA" stays where it is with an accelerator check for its condition."""
    if construct.condition is not None and accelerator:
        span, node_class = construct.condition
        return [ReplaceExpr(span, node_class, f"not {ACCELERATOR_AVAILABLE}")]
    edits: list[Edit] = [ReplaceStatement(construct.span, "pass" if construct.empty_body else "")]
    if marks and construct.scope is not None:
        prefix = "" if construct.condition is not None else "pytest.mark."
        edits.append(AddMarks(construct.scope, need, prefix=prefix) if construct.target == "devcaps"
                     else AddMarks(construct.scope, need, tuple(marks)))
    return edits


def _module_edits(construct: Construct, marks: list[str], accelerator: bool) -> tuple[list[Edit], str | None]:
    if construct.kind == "module_statement" and construct.condition is not None:
        if marks:  # TestCase = NoTest / sys.exit(): no mark switches a whole unittest module off
            return [], "a module gate that switches the tests off by hand takes no marks; move them to the classes"
        span, node_class = construct.condition
        return [ReplaceExpr(span, node_class, f"not {ACCELERATOR_AVAILABLE}")], None
    if construct.kind == "module_statement":
        if marks and construct.has_pytestmark:
            return [], "the module already sets pytestmark; add the marks there"
        lines = [f"pytestmark = {_mark_value(marks)}"] if marks else []
        if accelerator:
            lines.append(f"if not {ACCELERATOR_AVAILABLE}:\n    {construct.skip_source}")
        return [ReplaceStatement(construct.span, "\n".join(lines))], None
    parts = marks + ([ACCELERATOR_SKIP["pytest"]] if accelerator else [])
    if construct.statement is not None:  # the whole pytestmark value
        code = f"pytestmark = {_mark_value(parts)}" if parts else ""
        return [ReplaceStatement(construct.statement, code)], None
    if len(parts) == 1:
        return [ReplaceExpr(construct.span, "Call", parts[0])], None
    return [], "one element of a pytestmark list must stay one mark"


def _mark_value(marks: list[str]) -> str:
    return marks[0] if len(marks) == 1 else "[" + ", ".join(marks) + "]"
