"""Names a test file imports from its own project's modules (``from gpu_utils import gpu_name``,
``from .common import FP8Base``, ``import helpers``): which are CUDA-only to run.

A gate in front of a test that runs such a name stays (``analyze``'s ``imported``): rewriting it
would run the helper's CUDA code on every device, as with a conftest fixture
(:mod:`pytest_devcaps.lint.conftests`). A module is judged by its text as it is (``--fix`` of one
file never rewrites the modules it imports): a function, or a method, whose code (or what it
reaches in its own module) has a finding that fails off CUDA, or calls a CUDA-only library, is
CUDA-only, fixable or not; fix that module first, then the tests that import it.

A module is the tests' own when it resolves to a file under the project root (the first folder up
from the test file with a pyproject.toml, setup.cfg, setup.py, tox.ini, pytest.ini or .git) in the
test file's top folder (``tests/``), or at the root itself: relative imports from the test file's
package, absolute ones from the test file's folder or a folder above it (pytest's ``rootdir`` /
``prepend`` import modes put those on ``sys.path``). The package under test (``src/``, ``mylib/``
beside ``tests/``) is not read: its CUDA branches follow the device a test gives them, and it is
what the lint's findings in the tests are about, as an installed package is.
``torch`` is never the project's module here: PyTorch's own test helpers
(``torch.testing._internal``) are what the lint's gate table describes. ``from m import *`` is not
followed (what it binds is not written in the file).
"""

from __future__ import annotations

import ast
import functools
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping

from pytest_devcaps.lint.conftests import MAX_LEVELS, project_root
from pytest_devcaps.lint.imported_uses import ImportedNames, reference
from pytest_devcaps.lint.libraries import libraries
from pytest_devcaps.lint.records import Span
from pytest_devcaps.lint.regions import CLASS_HOOKS, Function, RegionIndex, within_any
from pytest_devcaps.lint.rules import RULES
from pytest_devcaps.lint.source import Point, SourceFile, parse_source, read_text

NOT_THE_PROJECT = frozenset({"torch"})
HOOKS = "<hooks>"  # the member that stands for a class's hooks (what every test of a deriving class runs)


def module_file(test_file: Path, module: str | None, level: int, root: Path) -> Path | None:
    """The project file ``from <level dots><module> import ...`` / ``import <module>`` loads, if any."""
    parts = module.split(".") if module else []
    if level == 0 and (not parts or parts[0] in NOT_THE_PROJECT):
        return None
    here = test_file.resolve().parent
    if level:
        bases = [here]
        for _ in range(level - 1):
            bases = [bases[0].parent]
    else:
        bases = []
        folder = here
        for _ in range(MAX_LEVELS):
            bases.append(folder)
            if folder == root or folder.parent == folder:
                break
            folder = folder.parent
    for base in bases:
        stem = base.joinpath(*parts) if parts else base
        for candidate in (stem.with_name(stem.name + ".py") if parts else None, stem / "__init__.py"):
            if candidate is not None and candidate.is_file() and candidate.resolve() != test_file.resolve() \
                    and _beside_the_tests(candidate.resolve(), test_file.resolve(), root):
                return candidate.resolve()
    return None


def _beside_the_tests(module: Path, test_file: Path, root: Path) -> bool:
    """``module`` is the tests' own: under the root, in the same top folder as ``test_file``
    (``tests/common/gpu_utils.py`` for ``tests/unit/test_a.py``), or a file at the root itself."""
    if not module.is_relative_to(root) or not test_file.is_relative_to(root):
        return False
    here, there = test_file.relative_to(root).parts, module.relative_to(root).parts
    return len(there) == 1 or there[0] == here[0]


def _bindings(tree: ast.Module, test_file: Path, root: Path) -> Iterator[tuple[str, Path, str | None]]:
    """(the name bound in the test file, the module file, the name in that module or None for the
    module itself) for every import of a project module."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = module_file(test_file, node.module, node.level, root)
            for alias in node.names:
                if alias.name == "*":
                    continue
                bound = alias.asname or alias.name
                sub = module_file(test_file, f"{node.module}.{alias.name}" if node.module else alias.name,
                                  node.level, root)
                if sub is not None:
                    yield bound, sub, None  # ``from pkg import helpers``: a module
                elif source is not None:
                    yield bound, source, alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                found = module_file(test_file, alias.name, 0, root)
                if found is not None:
                    yield alias.asname or alias.name, found, None


Member = tuple[str, str]  # (module path, "f" / "Cls" / "Cls.method" / "Cls.<hooks>" / "VALUE")


@dataclass(frozen=True)
class ModuleFacts:
    """One module, judged alone: why each member is CUDA-only by its own code, and the members
    of other project modules each one reaches (calls, bases, re-exports)."""

    members: frozenset[str]
    direct: Mapping[str, str]
    reaches: Mapping[str, tuple[Member, ...]]
    bases: Mapping[str, tuple[Member, ...]] = field(default_factory=dict)  # a class -> its project bases


def lazy_imports(test_file: Path) -> Callable[[], ImportedNames]:
    """:func:`cuda_only_imports` of ``test_file``, judged on the first call (a file with no gate
    never needs it: ``analyze`` asks only where a gate is to decide), then remembered."""
    return functools.cache(functools.partial(cuda_only_imports, test_file))


def cuda_only_imports(test_file: Path, tree: ast.Module | None = None) -> ImportedNames:
    """What ``test_file`` imports from its project that is CUDA-only to run (its text is read
    when ``tree`` is not given; nothing when it cannot be read)."""
    if tree is None:
        parsed = _parse(test_file)
        if parsed is None:
            return ImportedNames()
        tree = parsed.tree
    names: dict[str, str] = {}
    bases: dict[str, str] = {}
    methods: dict[str, dict[str, str]] = {}
    for bound, path, name in _bindings(tree, test_file, project_root(test_file)):
        facts = _facts(path)
        if facts is None:
            continue
        if name is None:  # the module: ``helpers.gpu_name``, ``helpers.FP8Base``
            members = [(f"{bound}.{m}", m) for m in facts.members if "." not in m]
        else:
            members = [(bound, name)] if name in facts.members else []
        for written, member in members:
            why = cuda_only((str(path), member))
            if why is not None:
                names[written] = why
            hooks = cuda_only((str(path), f"{member}.{HOOKS}"))
            if hooks is not None:
                bases[written] = hooks
            of_class = _methods((str(path), member))
            if of_class:
                methods[written] = of_class
    return ImportedNames(names, bases, methods)


def _walk(start: Member, edges: Callable[[ModuleFacts, str], Iterable[Member]]) -> Iterator[tuple[Member, ModuleFacts]]:
    """Members breadth first from ``start`` along ``edges`` (each once: cycles end), with their
    module's facts (a module that cannot be read is passed over)."""
    seen = {start}
    pending = deque([start])
    while pending:
        member = pending.popleft()
        facts = _facts(Path(member[0]))
        if facts is None:
            continue
        yield member, facts
        for reached in edges(facts, member[1]):
            if reached not in seen:
                seen.add(reached)
                pending.append(reached)


def _methods(cls: Member) -> dict[str, str]:
    """Method name -> why it is CUDA-only, for a class and the project classes it derives from
    (the nearest definition of a name wins, as Python's lookup goes)."""
    found: dict[str, str | None] = {}
    for (path, name), facts in _walk(cls, lambda facts, name: facts.bases.get(name, ())):
        for member in sorted(facts.members):
            owner, _, method = member.partition(".")
            if owner == name and method and method != HOOKS and method not in found:
                found[method] = cuda_only((path, member))
    return {method: why for method, why in found.items() if why is not None}


def cuda_only(member: Member) -> str | None:
    """Why running ``member`` runs CUDA-only code (its own, or what it reaches in other project
    modules, transitively: import cycles included), or None. The first reason found breadth
    first: the nearest."""
    for (_, name), facts in _walk(member, lambda facts, name: facts.reaches.get(name, ())):
        if name in facts.direct:
            return facts.direct[name]
    return None


def _parse(path: Path) -> SourceFile | None:
    text = read_text(path)
    if isinstance(text, tuple):
        return None
    parsed = parse_source(text, str(path))
    return parsed if isinstance(parsed, SourceFile) else None


def _facts(path: Path) -> ModuleFacts | None:
    try:
        stamp = path.stat().st_mtime_ns
    except OSError:
        return None
    return _judge(str(path), stamp)


@functools.lru_cache(maxsize=256)
def _judge(path: str, stamp: int) -> ModuleFacts | None:
    parsed = _parse(Path(path))
    return _Judge(parsed, path).facts() if parsed is not None else None


class _Judge:
    """One module's members, each judged by what its region holds (``regions``): a finding that
    fails off CUDA or a CUDA-only library call, and the other modules' members it reaches."""

    def __init__(self, parsed: SourceFile, path: str) -> None:
        from pytest_devcaps.lint.analyze import analyze

        self.parsed, self.path = parsed, path
        name = Path(path).name
        self.bad: list[tuple[Span, str]] = sorted(
            [(parsed.span(Point(f.line, f.column - 1)), f"{name}:{f.line} {f.code} ({f.message.split(';')[0]})")
             for f in analyze(parsed.text, path).findings
             if RULES.get(f.code) is not None and RULES[f.code].blocks_cpu]
            + [(r.span, f"{name}:{r.span.line} {r.what}") for r in libraries(parsed)])
        self.imported: dict[str, Member] = {}  # a reference as written here -> a member of another module
        self.module_refs: dict[str, str] = {}  # a module bound here -> its path
        for bound, other, name_there in _bindings(parsed.tree, Path(path), project_root(Path(path))):
            if name_there is None:
                self.module_refs[bound] = str(other)
            else:
                self.imported[bound] = (str(other), name_there)
        self.uses = [(parsed.span(node), goes) for node in ast.walk(parsed.tree)
                     if (written := reference(node)) is not None and (goes := self.target(written))]
        self.index = RegionIndex(parsed)
        self.members: set[str] = set()
        self.direct: dict[str, str] = {}
        self.reaches: dict[str, tuple[Member, ...]] = {}
        self.bases: dict[str, tuple[Member, ...]] = {}

    def target(self, written: str) -> Member | None:
        """The other module's member a reference written here names."""
        if written in self.imported:
            return self.imported[written]
        head, _, tail = written.rpartition(".")
        if head in self.module_refs and tail:
            return self.module_refs[head], tail
        return None

    def judge(self, member: str, region: tuple[Span, ...], also: tuple[Member, ...] = ()) -> None:
        self.members.add(member)
        why = next((reason for spot, reason in self.bad if within_any(spot, region)), None)
        if why is not None:
            self.direct[member] = why
        reached = tuple(dict.fromkeys([t for spot, t in self.uses if within_any(spot, region)] + list(also)))
        if reached:
            self.reaches[member] = reached

    def facts(self) -> ModuleFacts:
        for statement in self.parsed.tree.body:
            if isinstance(statement, Function):
                self.judge(statement.name, self.index.of_call(statement))
            elif isinstance(statement, ast.ClassDef):
                self.judge_class(statement)
            elif isinstance(statement, (ast.Assign, ast.AnnAssign)):
                targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
                for name in (n for target in targets for n in ast.walk(target) if isinstance(n, ast.Name)):
                    self.judge(name.id, (self.parsed.span(statement),))
        for bound, reexported in self.imported.items():  # ``from .impl import gpu_name`` in an __init__.py
            if bound not in self.members:
                self.members.add(bound)
                self.reaches[bound] = (reexported,)
        return ModuleFacts(frozenset(self.members), self.direct, self.reaches, self.bases)

    def judge_class(self, cls: ast.ClassDef) -> None:
        """Each method (what it runs here, and what it calls of project bases: ``super().x``,
        ``self.x`` defined there), the hooks together, and the class itself (naming it runs it,
        as ``regions`` reads a helper class of the file: every method)."""
        outer = [t for b in cls.bases if (w := reference(b)) is not None and (t := self.target(w)) is not None]
        self.bases[cls.name] = tuple(outer)
        hooks: list[Span] = []
        for klass in self.index.lineage(cls):
            for member in (m for m in klass.body if isinstance(m, Function)):
                region = self.index.of_call(member, cls)
                if member.name in CLASS_HOOKS:
                    hooks += region
                inherited = tuple((p, f"{m}.{attr}") for attr in _inherited_calls(member, self.index, cls)
                                  for p, m in outer)
                self.judge(f"{cls.name}.{member.name}", region, inherited)
        self.judge(f"{cls.name}.{HOOKS}", tuple(hooks), tuple((p, f"{m}.{HOOKS}") for p, m in outer))
        self.judge(cls.name, (), tuple((self.path, m) for m in self.members if m.startswith(cls.name + ".")))


def _inherited_calls(method: ast.FunctionDef | ast.AsyncFunctionDef, index: RegionIndex,
                     cls: ast.ClassDef) -> list[str]:
    """The methods ``method`` runs that its class does not define here: ``super().name`` and
    ``self.name`` / ``cls.name`` with no definition in the class or its in-module bases."""
    names: list[str] = []
    for node in ast.walk(method):
        if not isinstance(node, ast.Attribute):
            continue
        value = node.value
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super":
            names.append(node.attr)
        elif isinstance(value, ast.Name) and value.id in ("self", "cls") and index.method(cls, node.attr) is None:
            names.append(node.attr)
    return list(dict.fromkeys(names))
