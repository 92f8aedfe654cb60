"""The package's shape: no import cycles (imports inside functions count) and short functions."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"pytest_devcaps": ROOT / "pytest_devcaps", "devcaps_kernels": ROOT / "kernels"}
MAX_FUNCTION_LINES = 60


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for the package and the kernels (suites are test code)."""
    found: dict[str, Path] = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            if "suites" in parts:
                continue
            name = ".".join((package, *parts))
            found[name.removesuffix(".__init__")] = path
    return found


def _imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Modules of ours that ``name`` imports anywhere in its body (functions included)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:  # `from pkg import submodule` imports the submodule
                sub = f"{base}.{alias.name}"
                targets.add(sub if sub in known else base)
    # Importing a.b.c runs a/__init__ and a/b/__init__ first; those are edges of Python's
    # making, not of this module's code, so only the named module counts.
    return {t for t in targets if t in known and t != name}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        if state.get(node) == 1:
            return path[path.index(node):] + [node]
        if state.get(node) == 2:
            return None
        state[node] = 1
        for target in sorted(graph[node]):
            found = visit(target, [*path, node])
            if found:
                return found
        state[node] = 2
        return None

    for node in sorted(graph):
        found = visit(node, [])
        if found:
            return found
    return None


def test_no_import_cycles() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert "pytest_devcaps.registry.build" in graph["pytest_devcaps.registry"]  # the walk sees imports
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_kernels_do_not_import_the_test_plugin() -> None:
    modules = _modules()
    for name, path in modules.items():
        if name.startswith("devcaps_kernels"):
            plugin_imports = {t for t in _imports(name, path, modules) if t.startswith("pytest_devcaps")}
            assert not plugin_imports, (name, plugin_imports)


def test_no_function_is_longer_than_sixty_lines() -> None:
    long: list[str] = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert node.end_lineno is not None
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({length} lines)")
    assert not long, "functions over 60 lines:\n" + "\n".join(long)


# --- rooms and layers, read from docs/ARCHITECTURE.md (the page is the one source) ----------

DOC = ROOT / "docs" / "ARCHITECTURE.md"
_LAYER_ROW = re.compile(r"^\| (\d+) \| `([\w.]+/?)` \| ([^|]*) \|")
EXTERNAL = "pytest"
"""The one outside package the table rules on: a room that may import pytest (or _pytest) says so."""


def _room_name(text: str) -> str:
    return text.removesuffix("/").removesuffix(".py")


def _table() -> dict[str, tuple[int, frozenset[str]]]:
    """Room (``errors``, ``_util``, ``__init__``) -> its layer and the rooms it may import, from
    the page's Layers table."""
    table: dict[str, tuple[int, frozenset[str]]] = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        match = _LAYER_ROW.match(line)
        if match:
            allowed = frozenset(_room_name(name) for name in re.findall(r"`([\w.]+/?)`", match.group(3)))
            table[_room_name(match.group(2))] = (int(match.group(1)), allowed)
    return table


def _layers() -> dict[str, int]:
    return {room: layer for room, (layer, _) in _table().items()}


def _room(module: str) -> str:
    parts = module.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def _upward_arrows(graph: dict[str, set[str]], layers: dict[str, int]) -> list[str]:
    wrong = []
    for name, targets in graph.items():
        for target in targets:
            if not target.startswith("pytest_devcaps"):
                continue  # pytest has no layer: the rows say who may import it
            source_room, target_room = _room(name), _room(target)
            if source_room != target_room and layers[target_room] >= layers[source_room]:
                wrong.append(f"{name} (layer {layers[source_room]} {source_room}) imports {target} "
                             f"(layer {layers[target_room]} {target_room})")
    return sorted(wrong)


def _sideways_arrows(graph: dict[str, set[str]], table: dict[str, tuple[int, frozenset[str]]]) -> list[str]:
    """Imports a room's row does not allow (``pytest`` counts as a room of its own)."""
    wrong = []
    for name, targets in graph.items():
        source = _room(name)
        for target in targets:
            room = EXTERNAL if target.split(".")[0] in (EXTERNAL, "_pytest") else _room(target)
            if room != source and room not in table[source][1]:
                wrong.append(f"{name} ({source}) imports {target}: {source}'s row does not allow {room}")
    return sorted(wrong)


def _pytest_imports(path: Path) -> set[str]:
    """The pytest modules ``path`` imports anywhere (functions and typing blocks included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
        found.update(n for n in names if n.split(".")[0] in (EXTERNAL, "_pytest"))
    return found


def _plugin_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()
            if name.startswith("pytest_devcaps")}


def test_every_room_has_a_layer_and_every_layer_a_room() -> None:
    layers = _layers()
    rooms = {_room(name) for name in _plugin_graph()}
    assert rooms == set(layers), (sorted(rooms - set(layers)), sorted(set(layers) - rooms))
    assert len(set(layers.values())) == len(layers), "each room has a layer of its own"


def test_no_arrow_runs_up_a_layer() -> None:
    layers = _layers()
    wrong = _upward_arrows(_plugin_graph(), layers)
    assert not wrong, "imports that run up a layer:\n" + "\n".join(wrong)


def test_every_allowed_room_is_a_lower_room() -> None:
    table = _table()
    wrong = [f"{room} (layer {layer}) may import {other}" for room, (layer, allowed) in table.items()
             for other in allowed if other != EXTERNAL and (other not in table or table[other][0] >= layer)]
    assert not wrong, wrong


def _graph_with_pytest() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) | _pytest_imports(path)
            for name, path in modules.items() if name.startswith("pytest_devcaps")}


def test_no_room_imports_what_its_row_does_not_allow() -> None:
    wrong = _sideways_arrows(_graph_with_pytest(), _table())
    assert not wrong, "imports the Layers table does not allow:\n" + "\n".join(wrong)


def test_the_rows_keep_the_bridge_and_the_reports_apart() -> None:
    """The rules the table exists for: the unittest bridge runs without pytest and without the
    pytest glue; reports depend on no harness and no hook specification."""
    table = _table()
    assert not {"session", "parallel", "plugin", EXTERNAL} & table["testcase"][1]
    assert not {"distributed", "hookspecs", "session", EXTERNAL} & table["report"][1]
    assert not {EXTERNAL, "session"} & table["environment"][1]


def test_the_table_check_sees_a_sideways_import() -> None:
    """The check itself, on a planted graph: a room importing a lower room its row does not name
    (the bridge reaching into session/, a report into distributed/, pytest where it is not
    allowed) is reported; an allowed import is not."""
    table = {"errors": (1, frozenset()), "distributed": (2, frozenset({"errors"})),
             "report": (3, frozenset({"errors"})), "session": (4, frozenset({"errors", EXTERNAL})),
             "testcase": (5, frozenset({"errors"}))}
    graph = {"pytest_devcaps.report.formats": {"pytest_devcaps.errors", "pytest_devcaps.distributed.ranks"},
             "pytest_devcaps.testcase": {"pytest_devcaps.session.options", "pytest"},
             "pytest_devcaps.session.state": {"pytest", "pytest_devcaps.errors"}}
    assert _upward_arrows(graph, {room: layer for room, (layer, _) in table.items()}) == []
    assert _sideways_arrows(graph, table) == [
        "pytest_devcaps.report.formats (report) imports pytest_devcaps.distributed.ranks: "
        "report's row does not allow distributed",
        "pytest_devcaps.testcase (testcase) imports pytest: testcase's row does not allow pytest",
        "pytest_devcaps.testcase (testcase) imports pytest_devcaps.session.options: "
        "testcase's row does not allow session"]


def test_the_table_check_fails_on_a_planted_import_in_a_copy(tmp_path: Path) -> None:
    """End to end on a copy of the package: one planted ``import`` in ``report/formats.py``
    makes the real graph of the copy fail the real table."""
    import shutil

    copy = tmp_path / "pytest_devcaps"
    shutil.copytree(ROOT / "pytest_devcaps", copy, ignore=shutil.ignore_patterns("__pycache__", "suites", "csrc"))
    formats = copy / "report" / "formats.py"
    formats.write_text(formats.read_text(encoding="utf-8") + "\nfrom pytest_devcaps.distributed import ranks\n",
                       encoding="utf-8")
    modules = {name: copy.joinpath(*path.relative_to(ROOT / "pytest_devcaps").parts)
               for name, path in _modules().items() if name.startswith("pytest_devcaps")}
    graph = {name: _imports(name, path, modules) | _pytest_imports(path) for name, path in modules.items()}
    assert _sideways_arrows(graph, _table()) == [
        "pytest_devcaps.report.formats (report) imports pytest_devcaps.distributed.ranks: "
        "report's row does not allow distributed"]


def test_the_layering_check_sees_an_upward_arrow() -> None:
    """The check itself: an arrow from a low room to a high one is reported."""
    layers = {"errors": 1, "session": 17}
    graph = {"pytest_devcaps.errors": {"pytest_devcaps.session.state"}, "pytest_devcaps.session.state": set()}
    assert _upward_arrows(graph, layers) == [
        "pytest_devcaps.errors (layer 1 errors) imports pytest_devcaps.session.state (layer 17 session)"]


def _documented_modules() -> set[str]:
    """Module files the page's Modules block names, as paths relative to the repository."""
    block = DOC.read_text(encoding="utf-8").split("## Modules", 1)[1].split("```")[1]
    named: set[str] = set()
    stack: list[tuple[int, str]] = []
    for line in block.splitlines():
        stripped = line.lstrip()
        if not stripped:
            continue
        indent = len(line) - len(stripped)
        tokens = []
        for token in stripped.split(" "):
            if token.endswith(".py") or (token.endswith("/") and "." not in token):
                tokens.append(token)
            elif token:
                break
        if not tokens:
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        prefix = "".join(folder for _, folder in stack)
        named.update(prefix + token for token in tokens if token.endswith(".py"))
        if len(tokens) == 1 and tokens[0].endswith("/"):
            stack.append((indent, tokens[0]))
    return named


def test_the_page_names_every_module_and_only_modules() -> None:
    actual = {str(path.relative_to(ROOT)) for folder in PACKAGES.values() for path in folder.rglob("*.py")
              if "suites" not in path.parts and (path.name != "__init__.py" or path.parent in PACKAGES.values())}
    named = _documented_modules()
    assert named == actual, (f"modules the page does not name: {sorted(actual - named)}; "
                             f"names that are not modules: {sorted(named - actual)}")


def test_module_basenames_are_unique_where_they_mean_different_things() -> None:
    """Within the plugin (kernels/ is a house of its own, imported as devcaps_kernels)."""
    seen: dict[str, list[str]] = {}
    for path in (ROOT / "pytest_devcaps").rglob("*.py"):
        if "suites" in path.parts or path.name in ("__init__.py", "base.py"):
            continue  # base.py is each room's protocol module: the same meaning everywhere
        seen.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not clashes, clashes


def test_every_lazy_name_resolves() -> None:
    """Each package's lazy table (``_util.lazy``) names a module and attribute that exist."""
    import importlib

    from pytest_devcaps._util.lazy import target

    for package_name, table_name in (("pytest_devcaps", "_LAZY"), ("pytest_devcaps.registry", "_WHERE"),
                                     ("pytest_devcaps.report", "_WHERE"),
                                     ("pytest_devcaps.distributed", "_WHERE")):
        package = importlib.import_module(package_name)
        for name, where in getattr(package, table_name).items():
            module, attribute = target(package_name, name, where)
            assert hasattr(importlib.import_module(module), attribute), (package_name, name, where)
            assert getattr(package, name) is getattr(importlib.import_module(module), attribute)


def test_lazy_dir_keeps_the_modules_own_names() -> None:
    """pluggy registers ``-p pytest_devcaps`` by dir(module): its hook must stay visible."""
    import pytest_devcaps

    names = dir(pytest_devcaps)
    assert "pytest_addhooks" in names and "requires_capability" in names



def _by_basename() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for dotted, path in _modules().items():
        if path.name != "__init__.py":  # a package's name is a room, not a module of the prose
            found.setdefault(dotted.rsplit(".", 1)[-1], []).append(dotted)
    return found


def _prose_references() -> list[tuple[str, str, str]]:
    """(reference, basename, attribute) for every backticked ``module.attribute`` (a module of
    ours by its basename: basenames are unique, so the page may use them alone) and every
    backticked ``room/file.py`` of the page."""
    from pytest_devcaps.config import load_catalogue

    catalogue = load_catalogue()  # attention.flash (or an alias) is not a module's name
    capabilities = {*catalogue.capabilities, *(a for spec in catalogue.capabilities.values()
                                               for a in spec.aliases)}
    modules = _by_basename()
    found = []
    for ref in re.findall(r"`([^`\s]+)`", DOC.read_text(encoding="utf-8")):
        if file := re.fullmatch(r"((?:[a-z_]+/)*)([a-z_]+)\.py", ref):
            if file.group(2) != "__init__" and not ref.startswith(("tests/", "benchmarks/")):
                found.append((ref, file.group(2), ""))
        elif attr := re.fullmatch(r"([a-z_]+)\.([A-Za-z_][A-Za-z0-9_]*)(?:\(.*\))?", ref):
            if attr.group(1) in modules and ref not in capabilities:
                found.append((ref, attr.group(1), attr.group(2)))
    return found


def test_the_prose_names_only_modules_and_names_that_exist() -> None:
    """The page's prose (``plugin.py`` evaluates ``evaluation.evaluate``...) names files and
    attributes that exist: a rename that leaves the page behind fails here."""
    import importlib

    modules = _by_basename()
    stale = []
    for ref, basename, attribute in _prose_references():
        if basename not in modules:
            stale.append(f"{ref}: no module {basename}")
        elif attribute:
            dotted = modules[basename][0]
            if not hasattr(importlib.import_module(dotted), attribute):
                stale.append(f"{ref}: {dotted} has no {attribute}")
    assert len(_prose_references()) > 25  # the page's prose is read at all
    assert not stale


PLUGIN_MAX_LINES = 150


def test_the_plugin_is_a_hook_table() -> None:
    """``plugin.py`` only wires hooks: under 150 lines, every function a few lines that delegate,
    and no stash key of its own (they are all in ``session/keys.py``)."""
    path = ROOT / "pytest_devcaps" / "plugin.py"
    text = path.read_text(encoding="utf-8")
    assert len(text.splitlines()) < PLUGIN_MAX_LINES
    tree = ast.parse(text)
    long = [node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
            and node.end_lineno is not None and node.end_lineno - node.lineno + 1 > 25]
    assert not long, f"plugin.py functions that do more than delegate: {long}"
    assert "StashKey" not in text and not any(isinstance(node, ast.ClassDef) for node in tree.body)


def test_every_stash_key_is_in_the_keys_module() -> None:
    keys = ROOT / "pytest_devcaps" / "session" / "keys.py"
    elsewhere = [str(path.relative_to(ROOT)) for path in (ROOT / "pytest_devcaps").rglob("*.py")
                 if path != keys and "StashKey[" in path.read_text(encoding="utf-8")]
    assert not elsewhere, f"stash keys outside session/keys.py: {elsewhere}"
    assert keys.read_text(encoding="utf-8").count("StashKey[") >= 15


# --- the prose inside the package: docstrings name modules that exist -----------------------

_DOTTED = re.compile(r"``((?:pytest_devcaps|devcaps_kernels)(?:\.\w+)+|[a-z_]+\.[a-z_]+)``")
_MOD_ROLE = re.compile(r":mod:`~?(\.?[\w.]+)`")
_BULLET = re.compile(r"^- ``(\w+)``", re.M)
_AMBIGUOUS_ROOMS = {"config", "distributed"}
"""``config.x`` and ``distributed.x`` in prose are as often pytest's Config and the
``distributed`` fixture as our rooms: only their full ``pytest_devcaps.`` names are checked."""


def _named_modules(name: str, doc: str, rooms: set[str], *, package: bool,
                   capabilities: frozenset[str] = frozenset()) -> list[str]:
    """Dotted names a docstring names as modules of ours: ``:mod:`` roles (relative ones from
    the module's package), ``pytest_devcaps.x.y`` and ``room.module`` in double backticks (a
    folder room first; capability names such as ``runtime.graphs`` are not modules), and in a
    package's docstring its ``- ``module`` `` list."""
    base = name if package else name.rpartition(".")[0]
    found = [f"{base}{ref}" if ref.startswith(".") else ref for ref in _MOD_ROLE.findall(doc)]
    for ref in _DOTTED.findall(doc):
        head = ref.split(".")[0]
        if head in ("pytest_devcaps", "devcaps_kernels"):
            found.append(ref)
        elif head in rooms and head not in _AMBIGUOUS_ROOMS and ref not in capabilities:
            found.append(f"pytest_devcaps.{ref}")
    if package:
        found += [f"{name}.{bullet}" for bullet in _BULLET.findall(doc)]
    return found


def _docstring_references() -> list[tuple[str, str]]:
    from pytest_devcaps.config import load_catalogue

    catalogue = load_catalogue()
    capabilities = frozenset({*catalogue.capabilities,
                              *(a for spec in catalogue.capabilities.values() for a in spec.aliases)})
    modules = _modules()
    rooms = {m.split(".")[1] for m, p in modules.items()
             if m.startswith("pytest_devcaps.") and m.count(".") == 1 and p.name == "__init__.py"}
    found = []
    for name, path in modules.items():
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        for ref in _named_modules(name, doc, rooms, package=path.name == "__init__.py",
                                  capabilities=capabilities):
            found.append((name, ref))
    return found


def _resolves(ref: str, modules: dict[str, Path]) -> bool:
    """A module of ours, or a name one defines (the prose may name ``module.function``)."""
    if ref in modules:
        return True
    parent, _, attribute = ref.rpartition(".")
    if parent in modules:
        return re.search(rf"^(?:def|class|async def) {attribute}\b|^{attribute}\b\s*[:=]",
                         modules[parent].read_text(encoding="utf-8"), re.M) is not None
    return False


def test_every_module_a_docstring_names_exists() -> None:
    """``lint/__init__``'s module list, ``plugin.py``'s ``session.startup``, a ``:mod:`` role:
    each names a module of ours that exists (a rename that leaves a docstring behind fails)."""
    modules = _modules()
    references = _docstring_references()
    assert len(references) > 40  # the docstrings are read at all
    lint_list = {ref for name, ref in references if name == "pytest_devcaps.lint"}
    assert "pytest_devcaps.lint.rules" in lint_list and len(lint_list) > 20
    stale = sorted(f"{name}: {ref}" for name, ref in references if not _resolves(ref, modules))
    assert not stale, "docstrings name modules that do not exist:\n" + "\n".join(stale)


def test_the_docstring_check_sees_a_stale_name() -> None:
    modules = _modules()
    doc = "The handshake is in ``parallel.xdist_hooks``; see :mod:`pytest_devcaps.lint.gates`.\n\n- ``model``  x"
    refs = _named_modules("pytest_devcaps.lint", doc, {"parallel", "lint"}, package=True)
    assert refs == ["pytest_devcaps.lint.gates", "pytest_devcaps.parallel.xdist_hooks", "pytest_devcaps.lint.model"]
    assert not any(_resolves(ref, modules) for ref in refs)
    assert _resolves("pytest_devcaps.parallel.xdist_handshake", modules)


#: Folders of tests/ named otherwise than a room: the test data, the kernels package
#: (devcaps_kernels), and the _util room (a folder named _util would read as private).
TEST_FOLDERS = {"data": None, "kernels": "devcaps_kernels", "util": "_util"}
#: The test modules at the top of tests/: about the whole project, not one room.
PROJECT_TESTS = {"test_architecture.py", "test_contracts.py", "test_packaging.py", "test_precommit.py",
                 "test_readme_profiles.py", "test_sdist.py", "test_typing.py"}


def test_the_tests_mirror_the_rooms() -> None:
    """tests/ has one folder per room it tests (the lint's tests all in tests/lint), and at its top
    only the project's own checks."""
    tests = ROOT / "tests"
    rooms = set(_layers())
    folders = {p.name for p in tests.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))}
    strays = sorted(f for f in folders if f not in rooms and f not in TEST_FOLDERS)
    assert not strays, f"test folders that name no room: {strays}"
    flat = {p.name for p in tests.glob("test_*.py")}
    assert flat <= PROJECT_TESTS, f"test modules of one room at the top of tests/: {sorted(flat - PROJECT_TESTS)}"
    lint_elsewhere = sorted(str(p.relative_to(tests)) for p in tests.rglob("test_*lint*.py")
                            if p.parent.name != "lint")
    assert not lint_elsewhere, f"lint tests outside tests/lint: {lint_elsewhere}"
