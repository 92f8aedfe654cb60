"""One file, start to end: parse, find, decide the gates, apply the ``# devcaps: allow`` pragmas,
and return the findings (sorted) with the edits ``--fix`` would make and the file's hardware
classification (``generic`` / ``accelerator`` / a vendor or device type, PyTorch's vocabulary).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Collection, Iterator

from pytest_devcaps.lint.finder import NO_DEVICE_HELPER, Finder
from pytest_devcaps.lint.helpers import threadable
from pytest_devcaps.lint.items import Item, decide
from pytest_devcaps.lint.records import (
    Analysis, Finding, Hardware, RemoveUnusedImport, ReplaceStatement, Span, Target, explains, join_hardware,
)
from pytest_devcaps.lint.resolution import resolving
from pytest_devcaps.lint.source import Pragma, SourceFile, parse_source

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


def analyze(text: str, path: str = "<string>", target: Target = "devcaps",
            untouched: Collection[str] = ()) -> Analysis:
    """The findings of one file and the edits ``--fix`` makes in ``target``'s vocabulary.
    ``untouched``: functions (qualified names, ``TestX.test_a``, ``test_b``) whose findings are
    all suppressed, as if every line carried ``# devcaps: allow``, so the gates they depend on
    stay (what ``--fix --verify`` undoes a test's rewrite with); names not defined here are ignored."""
    parsed = parse_source(text, path)
    if not isinstance(parsed, SourceFile):
        return unreadable(path, *parsed)
    parsed.target = target
    if untouched:
        _allow_functions(parsed, frozenset(untouched))
    with resolving(parsed.tree):
        return _analyze(parsed, path)


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


def _allow_functions(parsed: SourceFile, names: frozenset[str]) -> None:
    """Every line of the named functions, decorators included, reads as ``# devcaps: allow``."""
    for name, node in function_qualnames(parsed.tree):
        if name in names:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            for line in range(first, (node.end_lineno or node.lineno) + 1):
                parsed.pragmas[line] = Pragma(None, 0)


def _analyze(parsed: SourceFile, path: str) -> Analysis:
    finder = _find(parsed)
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
    for construct in finder.constructs:
        decide(construct, _residue(items, construct.region))
    _drop_spent_definitions(finder, items)
    kept = [i for i in items if not i.suppressed]
    findings = [i.finding(path) for i in kept]
    findings += [Finding(path, line, column, "DC000", why, "a known rule code")
                 for line, column, why in parsed.bad_pragmas]
    edits = tuple(e for item in kept for e in item.edits) + tuple(finder.plumbing)
    return Analysis(path, tuple(sorted(findings, key=_order)), edits)


def _find(source: SourceFile) -> Finder:
    """Read the file; read it again when helpers can be given a device (then their CUDA code
    is fixable and their callers pass ``device=``) or, where they cannot, use the module's
    ``device_type``."""
    finder = Finder(source)
    finder.visit(source.tree)
    needing = {i.helper for i in finder.items if i.helper and i.fix is None and not i.suppressed
               and i.why == NO_DEVICE_HELPER}
    if not needing:
        return finder
    threaded = threadable(source.tree, {n for n in needing if n}, finder.facts.local_gates)
    finder = Finder(source, threaded, global_helpers=True)
    finder.visit(source.tree)
    return finder


def _within(inner: Span, outer: Span) -> bool:
    return (outer.line, outer.col) <= (inner.line, inner.col) and (inner.end_line, inner.end_col) <= (
        outer.end_line, outer.end_col)


def _drop_spent_definitions(finder: Finder, items: list[Item]) -> None:
    """A gate the file defines (``is_cuda_8_9 = ...``) goes when every use was rewritten."""
    source = finder.source
    rewritten = [c.span for c in finder.constructs if c.items and c.items[0].edits]
    loads = [n for n in ast.walk(source.tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
    for gate in finder.facts.local_gates.values():
        where = source.span(gate.statement)
        uses = [source.span(n) for n in loads if n.id == gate.name and not _within(source.span(n), where)]
        if not uses or not all(any(_within(u, r) for r in rewritten) for u in uses):
            continue
        inside = sorted((i for i in items if _within(i.span, where)), key=lambda i: i.span)
        if not inside or any(i.suppressed for i in inside):
            continue
        for item in inside:
            item.edits.clear()
            item.fix = f"fixed with line {inside[0].span.line}"
        construct_imports = [RemoveUnusedImport(finder.facts.imports[n.id], n.id) for n in ast.walk(gate.statement)
                             if isinstance(n, ast.Name) and n.id in finder.facts.imports]
        inside[0].fixed(f"removed: every use of {gate.name} was rewritten", ReplaceStatement(where, ""),
                        *construct_imports)


def _residue(items: list[Item], region: Span | None) -> Item | None:
    """The first finding left unfixed in ``region`` (the code a gate guards; None: the file)
    that fails without CUDA: while it stays, so does that gate. Code elsewhere does not keep it."""
    left = [i for i in items if i.blocks_cpu and (i.fix is None or i.suppressed)
            and (region is None or _within(i.span, region))]
    return min(left, key=lambda i: i.span, default=None)


def _order(finding: Finding) -> tuple[int, int, str]:
    return finding.line, finding.column, finding.code


def classify_file(findings: tuple[Finding, ...]) -> Classification:
    relevant = [f for f in findings if f.code != "DC000"]
    hardware = join_hardware([f.hardware for f in relevant])
    because = tuple(f for f in relevant if explains(f.hardware, hardware))
    return Classification(hardware, because if hardware != "generic" else ())
