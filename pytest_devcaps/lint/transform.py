"""Applying the finder's edits with LibCST (a lossless syntax tree: comments and formatting
survive). The finder names nodes by span; LibCST's ``PositionProvider`` gives the same spans
(both count characters, both exclude parentheses), so each edit lands on the node it was
made for. Imports the new code needs (``pytest``, ``torch``...) are added with LibCST's
``AddImportsVisitor``; imports it may have made unused go with ``RemoveImportsVisitor``,
which keeps any that are still referenced.

Imported only through :mod:`pytest_devcaps.lint.codemod`, which first checks that LibCST (the
optional ``lint`` extra) is installed.
"""

from __future__ import annotations

import ast
import bisect
import re
from collections import defaultdict
from dataclasses import replace
from typing import Callable, Sequence, Union

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor
from libcst.metadata import MetadataWrapper, PositionProvider

from pytest_devcaps.lint import rules
from pytest_devcaps.lint.importpass import add_imports, remove_imports
from pytest_devcaps.lint.records import (
    VALUE, AddMarks, AddParameter, DropDefault, Edit, EditCall, EnsureDeviceType, Need, RemoveUnusedImport, ReplaceDecorator,
    Relayout, ReplaceExpr, ReplaceStatement, ScopeKey, Span,
)

IMPORTS = (("pytest_devcaps.runtime.", "pytest_devcaps.runtime"), ("pytest.", "pytest"),
           ("torch.", "torch"), ("unittest.", "unittest"))
# ast node class -> the LibCST classes the same source can parse to
NODE_CLASSES: dict[str, tuple[str, ...]] = {
    "Constant": ("SimpleString", "ConcatenatedString", "Integer", "Float", "Name"), "JoinedStr": ("FormattedString", "ConcatenatedString"),
    "Name": ("Name",), "Attribute": ("Attribute",), "Call": ("Call",), "IfExp": ("IfExp",),
    "Compare": ("Comparison",), "Subscript": ("Subscript",), "BoolOp": ("BooleanOperation",),
    "UnaryOp": ("UnaryOperation",),
}
Statement = Union[cst.SimpleStatementLine, cst.BaseCompoundStatement]
Result = Union[cst.CSTNode, cst.RemovalSentinel, cst.FlattenSentinel[cst.CSTNode]]


class _Plan:
    """The edits of one file, indexed the way the transformer looks them up."""

    def __init__(self, edits: Sequence[Edit]) -> None:
        self.exprs: dict[Span, ReplaceExpr] = {}
        self.calls: dict[Span, EditCall] = {}
        self.decorators: dict[Span, ReplaceDecorator] = {}
        self.statements: dict[Span, ReplaceStatement] = {}
        self.marks: dict[ScopeKey, Need] = {}
        self.params: dict[ScopeKey, dict[str, bool]] = defaultdict(dict)
        self.defaults: dict[ScopeKey, set[str]] = defaultdict(set)
        self.unused: list[RemoveUnusedImport] = []
        self.written: dict[ScopeKey, list[str]] = defaultdict(list)  # decorators given as code
        self.device_type = False
        self.prefix: dict[ScopeKey, str] = {}
        self.layouts: list[object] = []  # lint.layout.ClassLayout, applied last
        for edit in edits:
            self._add(edit)
        # the first line of every edited node's span, sorted: a node's lines hold those of its
        # descendants, so a statement or expression whose lines hold none of these edits nothing
        self.lines = sorted({span.line for table in (self.exprs, self.calls, self.decorators, self.statements)
                             for span in table})

    def touches(self, first: int, last: int) -> bool:
        index = bisect.bisect_left(self.lines, first)
        return index < len(self.lines) and self.lines[index] <= last

    def _add(self, edit: Edit) -> None:
        if isinstance(edit, ReplaceExpr):
            self.exprs[edit.span] = edit
        elif isinstance(edit, EditCall):
            self.calls[edit.span] = _merge_calls(self.calls.get(edit.span), edit)
        elif isinstance(edit, ReplaceDecorator):
            self.decorators[edit.span] = edit
        elif isinstance(edit, ReplaceStatement):
            self.statements[edit.span] = edit
        elif isinstance(edit, EnsureDeviceType):
            self.device_type = True
        elif isinstance(edit, AddMarks) and edit.decorators is not None:
            self.written[edit.scope].extend(d for d in edit.decorators if d not in self.written[edit.scope])
        elif isinstance(edit, AddMarks):
            self.prefix[edit.scope] = edit.prefix
            previous = self.marks.get(edit.scope)
            self.marks[edit.scope] = edit.need if previous is None else previous & edit.need
        elif isinstance(edit, AddParameter):
            self.params[edit.scope].setdefault(edit.name, edit.keyword_only)
        elif isinstance(edit, DropDefault):
            self.defaults[edit.scope].add(edit.name)
        elif isinstance(edit, Relayout):
            self.layouts.append(edit.layout)
        else:
            self.unused.append(edit)


def _merge_calls(old: EditCall | None, new: EditCall) -> EditCall:
    if old is None:
        return new
    return replace(old, func=new.func or old.func, method=new.method or old.method,
                   args=new.args if new.args is not None else old.args,
                   prepend=old.prepend + new.prepend, keywords=old.keywords + new.keywords)


class Transformer(cst.CSTTransformer):
    """Applies a plan; ``inserted`` is the code it wrote (to know which imports it needs)."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, plan: _Plan, torch_name: str = "torch") -> None:
        super().__init__()
        self.plan = plan
        self.inserted: list[str] = []
        self.torch_name = torch_name

    def span(self, node: cst.CSTNode) -> Span:
        position = self.get_metadata(PositionProvider, node)
        return Span(position.start.line, position.start.column, position.end.line, position.end.column)

    def code(self, text: str) -> str:
        text = through_torch_name(text, self.torch_name)
        self.inserted.append(text)
        return text

    def expression(self, text: str) -> cst.BaseExpression:
        return cst.parse_expression(self.code(text))

    def on_visit(self, node: cst.CSTNode) -> bool:
        """Skip a line of simple statements or an expression that holds no edit (most of a file):
        only its children would be visited, and none of them is edited. (Compound statements
        are always visited: a ``def``'s position leaves out its decorators, an ``if``'s its
        ``else``.)"""
        if type(node) in _SKIPPABLE:
            position = self.get_metadata(PositionProvider, node)
            if not self.plan.touches(position.start.line, position.end.line):
                return False
        return super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> Result:  # type: ignore[override]
        result = super().on_leave(original_node, updated_node)
        if isinstance(result, cst.SimpleStatementLine) and isinstance(original_node, cst.SimpleStatementLine) \
                and len(original_node.body) == 1:
            return self.statement(self.span(original_node.body[0]), result)
        if isinstance(result, cst.BaseCompoundStatement):
            return self.statement(self.span(original_node), result)
        if not isinstance(result, cst.BaseExpression) or result is not updated_node:
            return result
        span = self.span(original_node)
        call = self.plan.calls.get(span)
        if call is not None and isinstance(result, cst.Call):
            result = _edit_call(result, call, self.expression)
        expr = self.plan.exprs.get(span)
        if expr is not None and type(result).__name__ in NODE_CLASSES.get(expr.node, (expr.node,)):
            code = expr.code
            if VALUE in code and isinstance(result, cst.Attribute):
                code = code.replace(VALUE, cst.Module([]).code_for_node(result.value))
            new = self.expression(code)
            result = new.with_changes(lpar=result.lpar, rpar=result.rpar) if result.lpar else new
        return result

    def statement(self, span: Span, node: Statement) -> Result:
        edit = self.plan.statements.get(span)
        if edit is None:
            return node
        if not edit.code:
            return cst.RemoveFromParent()
        body: list[cst.CSTNode] = list(cst.parse_module(self.code(edit.code)).body)
        first = body[0]
        assert isinstance(first, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
        body[0] = first.with_changes(leading_lines=node.leading_lines)
        return cst.FlattenSentinel(body)

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        return updated_node.with_changes(body=self.keep_spacing(original_node.body, updated_node.body))

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock,
                            updated_node: cst.IndentedBlock) -> cst.IndentedBlock:
        return updated_node.with_changes(body=self.keep_spacing(original_node.body, updated_node.body))

    def keep_spacing(self, before: Sequence[cst.BaseStatement],
                     after: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement]:
        """A removed statement's blank lines go to the statement after it (two blank lines
        before a ``def`` stay two)."""
        result = list(after)
        index, carry = 0, None
        for statement in before:
            target = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) \
                and len(statement.body) == 1 else statement
            edit = self.plan.statements.get(self.span(target))
            if edit is not None and not edit.code:
                lines = getattr(statement, "leading_lines", ())
                blank = [line for line in lines if line.comment is None]
                carry = blank if carry is None or len(blank) > len(carry) else carry
                continue
            if carry is not None and index < len(result):
                result[index] = _with_blank_lines(result[index], carry)
                carry = None
            index += len(cst.parse_module(edit.code).body) if edit is not None else 1
        return result

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
        key = (original_node.name.value, self.span(original_node.name).line)
        decorated = self.decorate(original_node.decorators, updated_node.decorators, self.plan.marks.get(key),
                                  self.plan.written.get(key, []), self.plan.prefix.get(key, "pytest.mark."))
        return _parameters(updated_node.with_changes(decorators=decorated), self.plan.params.get(key, {}),
                           self.plan.defaults.get(key, set()))

    def leave_ClassDef(self, original_node: cst.ClassDef, updated_node: cst.ClassDef) -> cst.ClassDef:
        key = (original_node.name.value, self.span(original_node.name).line)
        return updated_node.with_changes(decorators=self.decorate(
            original_node.decorators, updated_node.decorators, self.plan.marks.get(key),
            self.plan.written.get(key, []), self.plan.prefix.get(key, "pytest.mark.")))

    def decorate(self, before: Sequence[cst.Decorator], after: Sequence[cst.Decorator],
                 need: Need | None, written: Sequence[str] = (), prefix: str = "pytest.mark.") -> list[cst.Decorator]:
        marks = [*(need.render(prefix) if need is not None else ()), *written]
        decorators = [cst.Decorator(self.expression(m)) for m in marks]
        for old, new in zip(before, after):
            edit = self.plan.decorators.get(self.span(old.decorator))
            if edit is None:
                decorators.append(new)
                continue
            replacement = [cst.Decorator(self.expression(d)) for d in edit.decorators]
            if replacement:
                replacement[0] = replacement[0].with_changes(leading_lines=new.leading_lines)
                replacement[-1] = replacement[-1].with_changes(trailing_whitespace=new.trailing_whitespace)
            decorators.extend(replacement)
        return _unique_decorators(decorators)


def _concrete(base: type) -> set[type]:
    found: set[type] = {base} if not getattr(base, "__abstractmethods__", None) else set()
    subclasses: list[type] = base.__subclasses__()
    for sub in subclasses:
        found |= _concrete(sub)
    return found


# a set of classes, not an isinstance test on LibCST's abstract bases: on_visit runs for every node
_SKIPPABLE = frozenset(_concrete(cst.BaseExpression) | {cst.SimpleStatementLine})


def _unique_decorators(decorators: list[cst.Decorator]) -> list[cst.Decorator]:
    """A decorator written twice (a mark and a rewritten gate saying the same) once."""
    seen: set[str] = set()
    kept = []
    for decorator in decorators:
        code = cst.Module([]).code_for_node(decorator.decorator)
        if code not in seen:
            seen.add(code)
            kept.append(decorator)
    return kept


def _with_blank_lines(node: cst.BaseStatement, blank: list[cst.EmptyLine]) -> cst.BaseStatement:
    if not isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
        return node
    own = list(node.leading_lines)
    if sum(line.comment is None for line in own) >= len(blank):
        return node
    return node.with_changes(leading_lines=[*blank, *(line for line in own if line.comment is not None)])


def _edit_call(node: cst.Call, edit: EditCall, parse: Callable[[str], cst.BaseExpression]) -> cst.Call:
    func = node.func
    if edit.func is not None:
        func = parse(edit.func)
    elif edit.method is not None and isinstance(func, cst.Attribute):
        func = func.with_changes(attr=cst.Name(edit.method))
    args = list(node.args)
    if edit.args is not None:
        kept = [a for a in args if a.keyword is not None or a.star]
        args = [cst.Arg(parse(a)) for a in edit.args] + kept
    args = [cst.Arg(parse(a)) for a in edit.prepend] + args
    present = {a.keyword.value for a in args if a.keyword is not None}
    no_space = cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))
    for name, value in edit.keywords:
        if name not in present:
            args.append(cst.Arg(parse(value), keyword=cst.Name(name), equal=no_space))
    return node.with_changes(func=func, args=args)


def _parameters(node: cst.FunctionDef, wanted: dict[str, bool], no_default: set[str]) -> cst.FunctionDef:
    params = node.params
    present = {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)}
    positional = [p.with_changes(default=None, equal=cst.MaybeSentinel.DEFAULT) if p.name.value in no_default
                  else p for p in params.params]
    keyword_only = list(params.kwonly_params)
    for name, kw_only in wanted.items():
        if name in present:
            continue
        param = cst.Param(cst.Name(name))
        if kw_only:
            keyword_only.append(param)
            continue
        first_default = next((i for i, p in enumerate(positional) if p.default is not None), len(positional))
        positional.insert(first_default, param)
    star = params.star_arg
    if keyword_only and not isinstance(star, (cst.Param, cst.ParamStar)):
        star = cst.ParamStar()
    return node.with_changes(params=params.with_changes(params=positional, kwonly_params=keyword_only,
                                                        star_arg=star))


# Names the new code may use bare, and the module each is imported from.
BARE_NAMES: dict[str, str] = {
    **{n: "pytest_devcaps" for n in ("requires_capability", "requires_devices", "requires_memory", "requires_ranks",
                                     "hardware", "skip_on")},
    "onlyAccelerator": "torch.testing._internal.common_device_type",
    "cycles_per_ms": "pytest_devcaps.runtime",
}
QUALIFIED_FROM = {"torch.testing._internal.common_distributed.": "torch.testing._internal.common_distributed"}


def _imports(context: CodemodContext, inserted: list[str], module: cst.Module) -> list[str]:
    """Schedule the imports the inserted code needs; returns the code with long qualified names
    shortened to the imported name."""
    out: list[str] = []
    for code in inserted:
        for prefix, module_name in QUALIFIED_FROM.items():
            for name in re.findall(re.escape(prefix) + r"(\w+)", code):
                AddImportsVisitor.add_needed_import(context, module_name, name)
        for name, module_name in BARE_NAMES.items():
            if re.search(rf"(?<![\w.]){name}\(|^{name}$", code):
                AddImportsVisitor.add_needed_import(context, module_name, name)
        out.append(code)
    wanted = sorted({m for code in inserted for prefix, m in IMPORTS
                     if re.search(r"(?<![\w.])" + re.escape(prefix), code)})
    written = module.code if wanted else ""  # once: a whole file's code generation
    for module_name in wanted:
        if not re.search(rf"^\s*import {re.escape(module_name)}\s*$", written, re.MULTILINE):
            AddImportsVisitor.add_needed_import(context, module_name)
    return out


class _ShortenQualified(cst.CSTTransformer):
    """``torch.testing._internal.common_distributed.skip_if_lt_x_gpu`` written by a rule ->
    ``skip_if_lt_x_gpu`` (imported by name, as a person writes it)."""

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.BaseExpression:
        code = cst.Module([]).code_for_node(updated_node)
        for prefix in QUALIFIED_FROM:
            if code.startswith(prefix) and "." not in code[len(prefix):]:
                return cst.Name(updated_node.attr.value)
        return updated_node


def _binds_device_type(module: cst.Module) -> bool:
    return any(re.match(rf"\s*{rules.DEVICE_TYPE_NAME}\s*[:=]", module.code_for_node(s))
               for s in module.body if isinstance(s, cst.SimpleStatementLine))


def _is_import(statement: cst.BaseStatement | cst.BaseSmallStatement, first: bool) -> bool:
    """An import line (the docstring counts, first), or ``try: import x / except ImportError``."""
    if isinstance(statement, cst.SimpleStatementLine):
        return all(isinstance(s, (cst.Import, cst.ImportFrom)) or (isinstance(s, cst.Expr) and first)
                   for s in statement.body)
    if isinstance(statement, cst.Try):
        return all(_is_import(s, False) for s in statement.body.body)
    return False


def _names_device_type(module: cst.Module, statement: cst.BaseStatement) -> bool:
    """The statement reads ``device_type`` when the module runs (a def or class body does not,
    its decorators and base classes do)."""
    if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
        parts: list[cst.CSTNode] = [*statement.decorators]
        if isinstance(statement, cst.ClassDef):
            parts += list(statement.bases)
        return any(re.search(rf"\b{rules.DEVICE_TYPE_NAME}\b", module.code_for_node(p)) for p in parts)
    return re.search(rf"\b{rules.DEVICE_TYPE_NAME}\b", module.code_for_node(statement)) is not None


def _add_device_type(module: cst.Module, statement: str = rules.DEVICE_TYPE_STATEMENT) -> cst.Module:
    """One ``device_type = ...`` after the module's imports, the ones after other code too (no
    new E402), but before the first statement that reads it at import time."""
    if _binds_device_type(module):
        return module
    body = list(module.body)
    first_use = next((i for i, s in enumerate(body) if _names_device_type(module, s)), len(body))
    index = 0
    for i, existing in enumerate(body[:first_use]):
        if _is_import(existing, i == 0):
            index = i + 1
    line = cst.parse_statement(statement).with_changes(leading_lines=[cst.EmptyLine()])
    after = body[index] if index < len(body) else None
    if isinstance(after, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
        blank = sum(e.comment is None for e in after.leading_lines)
        wanted = 2 if isinstance(after, (cst.FunctionDef, cst.ClassDef)) else 1
        if blank < wanted:
            body[index] = after.with_changes(leading_lines=[cst.EmptyLine()] * (wanted - blank)
                                             + list(after.leading_lines))
    body.insert(index, line)
    return module.with_changes(body=body)


def _orphaned_imports(old: ast.Module, new: ast.Module) -> list[tuple[str, str | None, str | None]]:
    """Module-level imports the rewrite left unused: bound names read in ``old`` (the file
    before) and no more in ``new`` ((module, name, asname) for RemoveImportsVisitor; F401
    otherwise)."""
    read_before, read_after = _loaded_names(old), _loaded_names(new)
    found: list[tuple[str, str | None, str | None]] = []
    for statement in new.body:
        if isinstance(statement, ast.ImportFrom) and statement.module and not statement.level:
            for alias in statement.names:
                bound = alias.asname or alias.name
                if bound in read_before and bound not in read_after and alias.name != "*":
                    found.append((statement.module, alias.name, alias.asname))
        elif isinstance(statement, ast.Import):
            for alias in statement.names:
                bound = alias.asname or alias.name.split(".")[0]
                if bound in read_before and bound not in read_after:
                    found.append((alias.name, None, alias.asname))
    return found


def _loaded_names(tree: ast.Module) -> set[str]:
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    for node in ast.walk(tree):  # __all__ = ["name"] re-exports keep an import
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            names |= {c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    return names


LINE_LENGTH = 88  # black's and ruff's default


def _import_code(node: cst.ImportFrom, module: cst.Module) -> str | None:
    """``from x import a, b`` as a person (or ruff format) writes it."""
    if isinstance(node.names, cst.ImportStar) or node.module is None:
        return None
    source = "." * len(node.relative) + module.code_for_node(node.module)
    names = [module.code_for_node(a.with_changes(comma=cst.MaybeSentinel.DEFAULT)) for a in node.names]
    line = f"from {source} import {', '.join(names)}"
    if len(line) <= LINE_LENGTH:
        return line
    return f"from {source} import (\n" + "".join(f"    {n},\n" for n in names) + ")"


def _tidy_imports(module: cst.Module, original: str) -> cst.Module:
    """Imports LibCST's import visitors changed, rewritten on one line (or one name a line with
    a trailing comma when too long): no ``(\n    a)`` left behind."""
    body = list(module.body)
    for index, statement in enumerate(body):
        if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
                and isinstance(statement.body[0], cst.ImportFrom)):
            continue
        if module.code_for_node(statement.with_changes(leading_lines=[])).strip() in original:
            continue
        code = _import_code(statement.body[0], module)
        if code is not None:
            new = cst.parse_statement(code)
            body[index] = new.with_changes(leading_lines=statement.leading_lines)
    return module.with_changes(body=body)


def torch_name(tree: ast.Module) -> str:
    """The name the module binds torch to: ``torch``, or ``th`` for ``import torch as th`` alone
    (new code goes through that name rather than import torch a second time)."""
    aliases = [a.asname or a.name for s in tree.body if isinstance(s, ast.Import) for a in s.names
               if a.name == "torch"]
    return "torch" if not aliases or "torch" in aliases else aliases[0]


def through_torch_name(code: str, name: str) -> str:
    return code if name == "torch" else re.sub(r"(?<![\w.])torch\.", f"{name}.", code)


def rewrite(text: str, edits: Sequence[Edit]) -> str:
    """``text`` with ``edits`` applied and the imports the new code names added."""
    plan = _Plan(edits)
    before = ast.parse(text)  # the analysis read it: it parses
    transformer = Transformer(plan, torch_name(before))
    # a tree parsed here and used only here: no defensive copy (a whole second tree)
    module = MetadataWrapper(cst.parse_module(text), unsafe_skip_copy=True).visit(transformer)
    inserted = list(transformer.inserted)
    if plan.device_type:
        statement = through_torch_name(rules.DEVICE_TYPE_STATEMENT, transformer.torch_name)
        module = _add_device_type(module, statement)
        inserted.append(statement)
    context = CodemodContext()
    if plan.layouts:
        from pytest_devcaps.lint.layout import ClassLayout
        from pytest_devcaps.lint.relayout import COMMON_DEVICE_TYPE, COMMON_UTILS, relayout

        module, needed = relayout(module, [layout for layout in plan.layouts if isinstance(layout, ClassLayout)])
        for name in sorted(needed):
            AddImportsVisitor.add_needed_import(
                context, COMMON_UTILS if name == "HardwareClassification" else COMMON_DEVICE_TYPE, name)
    _imports(context, inserted, module)
    if any(prefix in code for code in inserted for prefix in QUALIFIED_FROM):  # a whole-tree walk
        module = module.visit(_ShortenQualified())
    module = add_imports(context, module)  # the visitor, over the only statements it changes
    try:
        after: ast.Module | None = ast.parse(module.code)
    except SyntaxError:
        after = None
    orphaned = _orphaned_imports(before, after) if after is not None else []
    if plan.unused or orphaned:
        removals = [(u.module, u.name or None, u.asname) for u in plan.unused] + list(orphaned)
        # the visitor; over the whole module only when in doubt
        module = remove_imports(module, removals, after)
    return _tidy_imports(module, text).code
