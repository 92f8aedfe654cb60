"""One file, start to end: parse, find, decide the gates, apply the ``# devcaps: allow`` pragmas,
and return the findings (sorted) with the edits ``--fix`` would make and the file's hardware
classification (``generic`` / ``accelerator`` / a vendor or device type, PyTorch's vocabulary).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping

from pytest_devcaps import gate_table
from pytest_devcaps.lint import layout
from pytest_devcaps.lint.finder import NO_DEVICE_HELPER, Finder
from pytest_devcaps.lint.gating import LocalGate, dotted, is_cuda_literal
from pytest_devcaps.lint.helpers import threadable
from pytest_devcaps.lint.imported_uses import ImportedNames, cuda_only_uses
from pytest_devcaps.lint.items import Construct, Item, Residue, decide
from pytest_devcaps.lint.libraries import (
    accelerator_only_calls,
    device_index_checks,
    libraries,
    stray_cuda_strings,
)
from pytest_devcaps.lint.records import (
    AddParameter,
    Analysis,
    Edit,
    EditCall,
    EnsureDeviceType,
    Finding,
    Hardware,
    Relayout,
    RemoveUnusedImport,
    ReplaceExpr,
    ReplaceStatement,
    Span,
    Target,
    explains,
    join_hardware,
)
from pytest_devcaps.lint.regions import RegionIndex, within, within_any
from pytest_devcaps.lint.resolution import resolving
from pytest_devcaps.lint.rules import FREE_DEVICE_FIXTURE
from pytest_devcaps.lint.source import TOO_DEEP, SourceFile, parse_source

DEVICE = "device"

HARDWARE_MEANING = {
    "generic": "runs anywhere, the CPU included",
    "accelerator": "needs some accelerator, any vendor",
    "cuda": "specific to the CUDA device type (NVIDIA or ROCm)",
    "nvidia": "specific to NVIDIA GPUs",
    "amd": "specific to AMD GPUs (ROCm)",
}


@dataclass(frozen=True)
class Classification:
    """The ``@pytest.mark.hardware(...)`` the file's tests would carry, and the findings behind it."""

    hardware: Hardware
    because: tuple[Finding, ...]

    @property
    def reason(self) -> str:
        lines = ", ".join(f"line {f.line} {f.code}" for f in self.because[:3])
        more = f" and {len(self.because) - 3} more" if len(self.because) > 3 else ""
        return HARDWARE_MEANING[self.hardware] + (f" ({lines}{more})" if lines else "")


def unreadable(path: str, line: int, column: int, why: str) -> Analysis:
    return Analysis(path, (Finding(path, line, column, "DC000", why, "a UTF-8 Python file"),), readable=False)


def analyze(text: str, path: str = "<string>", target: Target = "devcaps", *,
            untouched: frozenset[str] = frozenset(),
            external_fixtures: Mapping[str, str] | None = None,
            imported: Callable[[], ImportedNames] | None = None) -> Analysis:
    """The findings of one file and the edits ``--fix`` makes in ``target``'s vocabulary.

    ``untouched``: tests (``TestX.test_a`` / ``test_b``) whose code the rewrite leaves as it is,
    gates included (``--verify`` undoing a rewrite that made a test worse); ``external_fixtures``:
    fixtures this file's tests request from a ``conftest.py``, with why each is CUDA-only
    (:func:`pytest_devcaps.lint.conftests.cuda_only_fixtures`); ``imported``: gives what this
    file imports from its project's modules that is CUDA-only to run, called only where the file
    has a gate to decide (:func:`pytest_devcaps.lint.project_imports.lazy_imports`)."""
    parsed = parse_source(text, path)
    if not isinstance(parsed, SourceFile):
        return unreadable(path, *parsed)
    parsed.target = target
    try:
        with resolving(parsed.tree):
            return _analyze(parsed, path, untouched, dict(external_fixtures or {}),
                            imported or ImportedNames)
    except RecursionError:  # the walks are recursive: one DC000 for the file, never a traceback
        return unreadable(path, 1, 1, TOO_DEEP)


MAX_HOLD_ROUNDS = 6
# Edits that change nothing a kept gate lets run (``.cuda()`` -> ``.to(device_type)`` is the same
# call wherever the gate passes): allowed in the code it holds. What changes the test itself
# (a device fixture parameter that parametrizes it, marks, decorators) is not.
NEUTRAL_EDITS = (ReplaceExpr, EditCall, ReplaceStatement, RemoveUnusedImport, EnsureDeviceType)
UNTOUCHED = "left as it was: --verify undid its rewrite"


def _analyze(parsed: SourceFile, path: str, untouched: frozenset[str], external: dict[str, str],
             imported: Callable[[], ImportedNames]) -> Analysis:
    """Read the file, decide every gate, and hold (leave as they are) the regions of the gates
    that stay; read again until no more gates stay (holding code only adds CUDA-only residue)."""
    index = RegionIndex(parsed)
    held: dict[Span, str] = {span: UNTOUCHED for span in _untouched_spans(parsed, index, untouched)}
    kept: dict[tuple[str, Span], str] = {}
    for _ in range(MAX_HOLD_ROUNDS):
        finder, items, residues, protected = _round(parsed, index, held, kept, external, imported)
        grown = _held_regions(finder, index, held, kept)
        grown = _hold_parametrized(items, index, residues, protected, held) or grown
        if not grown:
            break
    _drop_spent_definitions(finder, items, held)
    if parsed.target == "torch" and layout.available():
        items = items + _layouts(parsed, items, held, residues)
    shown = [i for i in items if not i.suppressed]
    findings = [i.finding(path) for i in shown]
    findings += [Finding(path, line, column, "DC000", why, "a known rule code")
                 for line, column, why in parsed.bad_pragmas]
    edits = tuple(e for item in shown for e in item.edits) + tuple(
        e for e in finder.plumbing if not _in_held(_edit_span(e), held))
    return Analysis(path, tuple(sorted(findings, key=_order)), edits)


def _round(parsed: SourceFile, index: RegionIndex, held: dict[Span, str], kept: dict[tuple[str, Span], str],
           external: dict[str, str],
           imported: Callable[[], ImportedNames]) -> tuple[Finder, list[Item], list[Residue], list[Span]]:
    finder = _find(parsed, frozenset(held))
    gates = [i for construct in finder.constructs for i in construct.items]
    for item in finder.items + finder.aliases.items() + gates:
        why = _held_by(item.span, held)
        if why is not None and (why == UNTOUCHED or isinstance(why, OpenHold)
                                or not all(isinstance(e, NEUTRAL_EDITS) for e in item.edits) or not item.edits):
            item.hold(why)
    items = finder.items + finder.aliases.decide()
    seen = {id(i) for i in items}
    for construct in finder.constructs:
        for item in construct.items:
            item.suppressed = item.suppressed or parsed.allowed(item.span.line, item.code)
            if id(item) not in seen:
                seen.add(id(item))
                items.append(item)
        if any(item.suppressed for item in construct.items):
            construct.keep = "suppressed with # devcaps: allow"
    residues = [r for r in (i.residue for i in items) if r is not None] + libraries(parsed) \
        + accelerator_only_calls(parsed) + stray_cuda_strings(parsed, [i.span for i in items]) \
        + _guarded_bindings(parsed, finder) + _dtypes_if_alone(parsed) + device_index_checks(parsed) \
        + _external_residue(index, external) \
        + ([Residue(span, what) for span, what in cuda_only_uses(parsed, imported())] if finder.constructs else [])
    protected: list[Span] = []
    for construct in _innermost_first(finder.constructs, index):
        own = kept.get(_identity(construct))
        held_why = next((i.held or i.why for i in construct.items if i.frozen), None)
        if own is not None or held_why is not None:
            construct.keep = own or held_why
        why = decide(construct, _residue(residues, construct, protected))
        # a gate that stays for what it says itself (``skipif(torch.cuda.device_count() > 0)``:
        # a bounded count no mark states) keeps its test as it was too
        if why is not None and (construct.restricts or (construct.need.blockers and not construct.generic)):
            kept.setdefault(_identity(construct), why)
            protected.extend(construct.anchors if construct.anchors is not None else ())
    _keep_cuda_classes(finder, index, residues, protected)
    return finder, items, residues, protected


# CUDA-only where the class is instantiated for a device, whatever gate its test has
AT_COLLECTION = "CUDA-only at collection"


def _dtypes_if_alone(parsed: SourceFile) -> list[Residue]:
    """``@dtypesIfCUDA(...)`` on a test: the dtypes another device would run it with (its
    ``@dtypes``) have not run where the test was CUDA's, and what it asserts may be CUDA's
    dtypes: it stays CUDA's. With no ``@dtypes`` at all, instantiating it for another device
    raises "@dtypes is mandatory when using @dtypesIf" and the whole file fails to collect, so
    then its class's ``only_for="cuda"`` stays as well."""
    found = []
    for node in ast.walk(parsed.tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names = {dotted(d.func if isinstance(d, ast.Call) else d).rsplit(".", 1)[-1] for d in node.decorator_list}
            if "dtypesIfCUDA" in names and "dtypes" not in names:
                found.append(Residue(parsed.span(node), f"@dtypesIfCUDA with no @dtypes on {node.name}",
                                     AT_COLLECTION))
            elif "dtypesIfCUDA" in names:
                found.append(Residue(parsed.span(node), f"@dtypesIfCUDA on {node.name}: its @dtypes never ran"))
    return found


def _guarded_bindings(parsed: SourceFile, finder: Finder) -> list[Residue]:
    """What a module-level device check guards: an import under it (``if torch.cuda.is_available():
    from flash_attn import ...``; widened, a machine whose accelerator lacks the module fails to
    collect the file), and every read, in a function, of a name it binds (``triton`` in a test
    given the device fixture: its [cpu] copy meets a name that was never bound)."""
    guards = [c.guard for c in finder.constructs if c.guard is not None and c.guard in parsed.tree.body]
    found: list[Residue] = []
    bound: dict[str, int] = {}
    for guard in guards:
        for node in (n for statement in guard.body for n in ast.walk(statement)):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.append(Residue(parsed.span(node), f"an import under the check of line {guard.lineno}"))
                for alias in node.names:
                    bound[(alias.asname or alias.name).split(".")[0]] = guard.lineno
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound[node.name] = guard.lineno
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                bound[node.id] = guard.lineno
    if bound:
        for function in ast.walk(parsed.tree):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found += [Residue(parsed.span(n), f"{n.id}, bound only where the check of line {bound[n.id]} holds")
                          for statement in function.body for n in ast.walk(statement)
                          if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in bound]
    return found


def _layouts(parsed: SourceFile, items: list[Item], held: Mapping[Span, str], residues: list[Residue]) -> list[Item]:
    """``--target torch`` with HardwareClassification: a DC013 finding for each test class the
    rewrite touches, fixed by its layout (lint.layout) or left saying what a person decides."""
    shown = [i for i in items if not i.suppressed]
    evidence = layout.Evidence(
        held=tuple(span for span, why in held.items() if why != UNTOUCHED),
        residue=tuple(r.span for r in residues),
        findings=tuple(i.finding(parsed.path) for i in shown),
        device_code=layout.device_code(parsed.tree, parsed.span))
    spans = {id(node): parsed.span(node) for node in ast.walk(parsed.tree)
             if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    found = []
    for decision in layout.plan(parsed.tree, spans, evidence):
        cls = decision.cls
        span = Span(cls.lineno, cls.col_offset, cls.lineno, cls.col_offset + len("class"))
        item = Item(span, "DC013", f"`class {cls.name}`: test class without a hardware classification",
                    "hw_classification = HardwareClassification.<GENERIC|ACCELERATOR|CUDA> (PyTorch's TEST_LINTER)",
                    None, suppressed=parsed.allowed(cls.lineno, "DC013"))
        if decision.layout is not None:
            item.fixed(decision.layout.describe(), Relayout(decision.layout))
        else:
            item.why = decision.why
        found.append(item)
    return found


def _hold_parametrized(items: list[Item], index: RegionIndex, residues: list[Residue], protected: list[Span],
                       held: dict[Span, str]) -> bool:
    """A pytest test (or fixture) the rewrite gives the device fixture, whose region keeps
    CUDA-only code, is held as it was: its ``[cpu]`` copy would run that code on a CUDA machine
    where the test passed before."""
    grown = False
    owners = {e.scope for i in items for e in i.edits
              if isinstance(e, AddParameter) and e.name in (DEVICE, FREE_DEVICE_FIXTURE)}
    for key in sorted(owners):
        node = index.function(key)
        if node is None:
            continue
        region = index.of_function(node)
        left = [r for r in residues if within_any(r.span, region) and not any(within(r.span, p) for p in protected)]
        if not left:
            continue
        first = min(left, key=lambda r: r.span)
        reason = (f"line {first.span.line} is {first.only} ({first.what}): {node.name} is not given the device "
                  "fixture (its [cpu] copy would run that code)")
        for span in (index.source.span(node), *index.fixture_spans(node)):
            if span not in held:
                held[span] = reason
                grown = True
    return grown


def _keep_cuda_classes(finder: Finder, index: RegionIndex, residues: list[Residue], protected: list[Span]) -> None:
    """``only_for="cuda"`` stays where the class it instantiates keeps CUDA-only code (a
    jiterator test is CUDA's on every machine)."""
    for item, name in finder.instantiations:
        cls = index.classes.get(name)
        if cls is None or item.fix is None:
            continue
        region = index.of_class(cls)
        left = [r for r in residues if within_any(r.span, region) and (
            r.only == AT_COLLECTION or not any(within(r.span, p) for p in protected))]
        if left:
            first = min(left, key=lambda r: r.span)
            item.fix = None
            item.edits.clear()
            cuda = first.only.startswith("CUDA-only")
            item.hardware = "cuda" if cuda else "accelerator"
            whose = "the class is CUDA's" if cuda else "the class needs an accelerator"
            item.why = f"{whose}: line {first.span.line} is {first.only} ({first.what}); keep only_for"


def _identity(construct: Construct) -> tuple[str, Span]:
    return construct.kind, construct.span


def _innermost_first(constructs: list[Construct], index: RegionIndex) -> list[Construct]:
    """The constructs with their regions set, the smallest region first: a gate inside another
    is decided first, so a kept inner gate holds its code off the outer gate's residue."""
    for construct in constructs:
        construct.region, construct.anchors = _regions(construct, index)

    def size(construct: Construct) -> tuple[int, int]:
        if construct.anchors is None:
            return (1, 0)
        return (0, sum(r.end_line - r.line + 1 for r in construct.anchors))
    return sorted(constructs, key=size)


def _regions(construct: Construct, index: RegionIndex) -> tuple[tuple[Span, ...] | None, tuple[Span, ...] | None]:
    """(everything that runs through the gate, the code it sits on) as spans; None: the file."""
    anchor, guard = construct.anchor, construct.guard
    if guard is not None:
        guarded = index.guarded(guard)
        return guarded, guarded
    if isinstance(anchor, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return index.of_function(anchor), (index.source.span(anchor),)
    if isinstance(anchor, ast.ClassDef):
        return index.of_class(anchor), (index.source.span(anchor),)
    return None, None


def _residue(residues: list[Residue], construct: Construct, protected: list[Span]) -> Residue | None:
    """The first CUDA-only code left in the construct's region that no kept gate inside it holds
    off every other device (code elsewhere does not keep it)."""
    own = construct.anchors or ()
    left = [r for r in residues if within_any(r.span, construct.region)
            and not any(within(r.span, p) and p not in own for p in protected)]
    return min(left, key=lambda r: r.span, default=None)


def _held_regions(finder: Finder, index: RegionIndex, held: dict[Span, str],
                  kept: dict[tuple[str, Span], str]) -> bool:
    """Hold the code of every kept gate that restricts it (and the fixtures of a kept test): a
    gate that stays keeps its test as it was. True when this held more code than before."""
    grown = False
    gate_uses = _local_gate_uses(finder)
    for construct in finder.constructs:
        why = kept.get(_identity(construct))
        if why is None and construct.holds_world_size:
            grown = _hold_world_size(construct, index, held) or grown
        if why is None or (construct.kind == "expr" and construct.guard is None):
            continue  # a flag's value flows elsewhere: its uses are gates of their own
        spans = construct.anchors if construct.anchors is not None else (index.source.span(index.source.tree),)
        if isinstance(construct.anchor, (ast.FunctionDef, ast.AsyncFunctionDef)):
            spans = (*spans, *index.fixture_spans(construct.anchor), *_world_size_spans(index, construct.anchor))
        reason = f"its gate (line {construct.span.line}) stays: {why}"
        if _lets_in_any_accelerator(construct) or not construct.restricts:
            # the code runs on more than CUDA where the gate passes (``skip_if_lt_x_gpu``, a test
            # of the no-GPU path): no edit is neutral there, in the helpers it calls neither
            reason = OpenHold(reason)
            spans = (*spans, *(construct.region or ()))
        holds = [(span, reason) for span in spans]
        for gate in _defining(finder, construct, gate_uses):
            holds.append((index.source.span(gate.statement), OpenHold(
                f"{gate.name} is the gate of line {construct.span.line}, which stays: {why}")))
        for name, span in _definitions_read(index, construct):
            holds.append((span, OpenHold(
                f"{name} is read by the gate of line {construct.span.line}, which stays: {why}")))
        for span, because in holds:
            if span not in held:
                held[span] = because
                grown = True
    return grown


def _definitions_read(index: RegionIndex, construct: Construct) -> list[tuple[str, Span]]:
    """The definitions a kept gate's condition reads, and those they read in turn: a module
    helper or flag (``def cuda_ok(): ...; return torch.cuda.is_available()``), a method of the
    test's class (``self._has_cuda()``), an attribute set in it (``self.use_cuda = ...`` in
    ``setUp``). They stay as they are, as the file's own gates do: widened, they would let the
    kept test run on other accelerators while the gate still reads as it did."""
    anchor = construct.anchor
    cls = anchor if isinstance(anchor, ast.ClassDef) else index.class_of.get(id(anchor)) if anchor else None
    span = index.source.span
    named: dict[str, list[ast.AST]] = {}
    for owner in (index.source.tree, cls):
        for statement in owner.body if owner is not None else ():
            for name in _names_defined(statement):
                named.setdefault(name, []).append(statement)
    for function in ast.walk(index.source.tree):  # ``global USE_GPU`` then ``USE_GPU = ...`` (setUpModule)
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            declared = {name for n in ast.walk(function) if isinstance(n, ast.Global) for name in n.names}
            for node in ast.walk(function) if declared else ():
                if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                    for name in set(_names_defined(node)) & declared:
                        named.setdefault(name, []).append(node)
    if cls is not None:
        for node in ast.walk(cls):
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                            and target.value.id in ("self", "cls"):
                        named.setdefault(target.attr, []).append(node)
    inside = [n for n in ast.walk(anchor if anchor is not None else index.source.tree)
              if within(span(n), construct.span)]
    # ``DEVICE != "cuda"``: a device value compared with CUDA's name answers the same once the
    # value is the accelerator's ("cuda" exactly where it was, another name elsewhere)
    compared = {id(operand) for n in inside if isinstance(n, ast.Compare) and len(n.ops) == 1
                and isinstance(n.ops[0], (ast.Eq, ast.NotEq, ast.In, ast.NotIn))
                for operand, other in ((n.left, n.comparators[0]), (n.comparators[0], n.left))
                if is_cuda_literal(other)}
    pending = [_read_name(n) for n in inside if isinstance(n, (ast.Name, ast.Attribute)) and id(n) not in compared]
    found: dict[int, tuple[str, Span]] = {}
    while pending:
        name = pending.pop()
        for definition in named.get(name, ()):
            if id(definition) in found or definition is anchor:
                continue
            found[id(definition)] = (name, span(definition))
            pending += [_read_name(n) for n in ast.walk(definition) if isinstance(n, (ast.Name, ast.Attribute))]
    return list(found.values())


def _names_defined(statement: ast.stmt) -> list[str]:
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return [statement.name]
    targets = statement.targets if isinstance(statement, ast.Assign) else \
        [statement.target] if isinstance(statement, (ast.AnnAssign, ast.AugAssign)) else []
    return [t.id for t in targets if isinstance(t, ast.Name)]


def _read_name(node: ast.Name | ast.Attribute) -> str:
    return node.id if isinstance(node, ast.Name) else node.attr


def _local_gate_uses(finder: Finder) -> list[tuple[Span, str]]:
    """Where the file reads the gates it defines (``TEST_MULTIGPU = TEST_CUDA and ...``)."""
    gates = finder.facts.local_gates
    if not gates:
        return []
    source = finder.source
    return [(source.span(node), node.id) for node in ast.walk(source.tree)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in gates]


def _defining(finder: Finder, construct: Construct, uses: list[tuple[Span, str]]) -> list[LocalGate]:
    """The file's own gates a kept gate reads, and those they read: their definitions stay as
    they are (widened, ``TEST_MULTIGPU`` would let the kept test run on other accelerators)."""
    gates = finder.facts.local_gates
    pending = [name for span, name in uses if within(span, construct.span)]
    found: dict[str, LocalGate] = {}
    while pending:
        name = pending.pop()
        if name in found or name not in gates:
            continue
        gate = found[name] = gates[name]
        pending.extend(n.id for n in ast.walk(gate.expr) if isinstance(n, ast.Name) and n.id in gate.visible)
    return list(found.values())


def _hold_world_size(construct: Construct, index: RegionIndex, held: dict[Span, str]) -> bool:
    """A gate kept as written although it lets other accelerators in (``--target torch``'s
    ``skip_if_lt_x_gpu``): its test's code is rewritten, but the class's world_size stays."""
    if construct.keep is None or not isinstance(construct.anchor, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    grown = False
    for span in _world_size_spans(index, construct.anchor):
        if span not in held:
            held[span] = OpenHold(f"its gate (line {construct.span.line}) stays: {construct.keep}")
            grown = True
    return grown


def _world_size_spans(index: RegionIndex, test: ast.FunctionDef | ast.AsyncFunctionDef) -> list[Span]:
    """The ``world_size`` of a kept test's class (and its bases in the file): the ranks every test
    of the class spawns in. Held with the test: its CUDA count (``min(2, torch.cuda.device_count())``)
    is what keeps the kept test off other devices, so it stays as it was for every test."""
    cls = index.class_of.get(id(test))
    if cls is None:
        return []
    return [index.source.span(member) for klass in index.lineage(cls) for member in klass.body
            if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)) and member.name == "world_size"]


class OpenHold(str):
    """The reason code is held by a kept gate that lets it run on more than CUDA
    (``skip_if_lt_x_gpu(2)`` runs on any two accelerators): no edit is neutral there, since an
    edit changes what the code does on the other devices the gate lets in."""


def _lets_in_any_accelerator(construct: Construct) -> bool:
    """A gate of PyTorch's that lets its code run on other accelerators than CUDA: the gate
    table's row names more device types (``skip_if_lt_x_gpu(n)``: n of cuda, hpu or xpu)."""
    for item in construct.items:
        name = re.match(r"`?@?([\w.]+)", item.label)
        row = gate_table.GATES.get(name.group(1).rsplit(".", 1)[-1]) if name else None
        if row is not None and row.hardware == gate_table.ACCELERATOR and set(row.device_types) - {"cuda"}:
            return True
    return False


def _held_by(span: Span, held: Mapping[Span, str]) -> str | None:
    return next((why for region, why in held.items() if within(span, region)), None)


def _in_held(span: Span | None, held: Mapping[Span, str]) -> bool:
    return span is not None and _held_by(span, held) is not None


def _edit_span(edit: Edit) -> Span | None:
    return getattr(edit, "span", None)


def function_qualnames(tree: ast.Module) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function a module or its classes define (not those inside functions), by qualified name."""
    pending: list[tuple[str, ast.AST]] = [("", tree)]
    while pending:
        prefix, node = pending.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield prefix + child.name, child
            elif isinstance(child, ast.ClassDef):
                pending.append((f"{prefix}{child.name}.", child))


def _untouched_spans(parsed: SourceFile, index: RegionIndex, names: frozenset[str]) -> list[Span]:
    """The spans (decorators included) of the functions named ``Class.test`` or ``test``."""
    found: list[Span] = []
    for name, node in function_qualnames(parsed.tree):
        if name in names:
            span = parsed.span(node)
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            found.append(Span(first, 0, span.end_line, span.end_col))
    return found


def _external_residue(index: RegionIndex, external: Mapping[str, str]) -> list[Residue]:
    """A conftest fixture that is CUDA-only is residue where a test of this file requests it."""
    if not external:
        return []
    found = []
    for node in ast.walk(index.source.tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for name in index.fixtures_of(node):
                if name in external:
                    found.append(Residue(index.source.span(node), f"the conftest fixture {name!r}: {external[name]}"))
    return found


def _find(source: SourceFile, held: frozenset[Span] = frozenset()) -> Finder:
    """Read the file; read it again when helpers can be given a device (then their CUDA code
    is fixable and their callers pass ``device=``) or, where they cannot, use the module's
    ``device_type``. Code a kept gate holds lends no helper its device."""
    finder = Finder(source)
    finder.visit(source.tree)
    needing = {i.helper for i in finder.items if i.helper and i.fix is None and not i.suppressed
               and i.why == NO_DEVICE_HELPER}
    threaded: frozenset[str] = frozenset()
    if needing:
        threaded = threadable(source.tree, {n for n in needing if n}, finder.facts.local_gates,
                              without_device=lambda node: any(within(source.span(node), h) for h in held))
        finder = Finder(source, threaded, global_helpers=True)
        finder.visit(source.tree)
    mixing = _mixing_tests(source, finder)
    if mixing:
        finder = Finder(source, threaded, global_helpers=bool(needing), global_tests=mixing)
        finder.visit(source.tree)
    return finder


def _mixing_tests(source: SourceFile, finder: Finder) -> frozenset[tuple[str, int]]:
    """The pytest tests and fixtures whose region reaches code rewritten onto the module's
    ``device_type`` (``P = partial(torch.zeros, device=device_type)``, a helper no test lends
    its device): given the ``device`` fixture, their ``[cpu]`` copy would mix the CPU with the
    accelerator that code picked, so they use ``device_type`` as well."""
    spans = [i.span for i in finder.items if not i.suppressed and any(isinstance(e, EnsureDeviceType) for e in i.edits)]
    if not spans or not finder.facts.pytest_only:
        return frozenset()
    index = RegionIndex(source)
    candidates = [n for n in source.tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    candidates += [m for c in source.tree.body if isinstance(c, ast.ClassDef) for m in c.body
                   if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return frozenset((node.name, node.lineno) for node in candidates
                     if (node.name.startswith("test") or node.name in index.fixtures)
                     and any(within_any(span, index.of_function(node)) for span in spans))


def _drop_spent_definitions(finder: Finder, items: list[Item], held: Mapping[Span, str]) -> None:
    """A gate the file defines (``is_cuda_8_9 = ...``) goes when every use was rewritten (what
    held it came from inside it, or it would not go)."""
    source = finder.source
    rewritten = [c.span for c in finder.constructs if c.items and c.items[0].edits]
    loads = [n for n in ast.walk(source.tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
    # ``self.gpu_ok`` / ``TestX.gpu_ok`` reads a class-body gate by attribute: a use no gate rewrites
    attribute_reads = {n.attr for n in ast.walk(source.tree) if isinstance(n, ast.Attribute)}
    for gate in finder.facts.local_gates.values():
        where = source.span(gate.statement)
        uses = [source.span(n) for n in loads if n.id == gate.name and not within(source.span(n), where)]
        if not uses or gate.name in attribute_reads or not all(any(within(u, r) for r in rewritten) for u in uses):
            continue
        inside = sorted((i for i in items if within(i.span, where)), key=lambda i: i.span)
        outer = [region for region, why in held.items() if not within(region, where)]
        if not inside or any(i.suppressed or (i.frozen and any(within(i.span, r) for r in outer)) for i in inside):
            continue
        for item in inside:
            item.edits.clear()
            item.fix = f"fixed with line {inside[0].span.line}"
        construct_imports = [RemoveUnusedImport(finder.facts.imports[n.id], n.id) for n in ast.walk(gate.statement)
                             if isinstance(n, ast.Name) and n.id in finder.facts.imports]
        inside[0].fixed(f"removed: every use of {gate.name} was rewritten", ReplaceStatement(where, ""),
                        *construct_imports)


def _order(finding: Finding) -> tuple[int, int, str]:
    return finding.line, finding.column, finding.code


def classify_file(findings: tuple[Finding, ...]) -> Classification:
    relevant = [f for f in findings if f.code != "DC000"]
    hardware = join_hardware([f.hardware for f in relevant])
    because = tuple(f for f in relevant if explains(f.hardware, hardware))
    return Classification(hardware, because if hardware != "generic" else ())
