"""Issue 29 item 8: ``devcaps lint`` on hostile files. Every file is read through the safe reader
(regular files only, a size cap, encoding errors named), the work is linear in the size of the
file, recursion limits are a one-line DC000, a malformed pragma is refused, and ``--fix`` keeps
every byte it does not fix and counts only what it changed."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pytest_devcaps.commands.main import main
from pytest_devcaps.lint import analyze
from pytest_devcaps.lint.writer import MAX_SOURCE_BYTES

ROOT = Path(__file__).resolve().parents[2]

# One test block with a gate, a move, a device literal and a runtime call (our own input; the
# repository holds itself to the lint, so CUDA code lives in strings).
BLOCK = '''\
def helper_{i}(x):
    if not torch.cuda.is_available():
        return x
    return x.cuda() + {i}


@unittest.skipIf(not torch.cuda.is_available(), "needs CUDA")
class TestBlock{i}(unittest.TestCase):
    def test_move_{i}(self):
        x = torch.ones(3).cuda()
        y = torch.zeros(3, device="cuda")
        torch.cuda.synchronize()

    @unittest.skipIf(torch.cuda.device_count() < 2, "needs 2 GPUs")
    def test_two_{i}(self):
        b = helper_{i}(torch.ones(2, device="cuda:1"))
        self.assertTrue(b.is_cuda)


def test_guarded_{i}():
    if not torch.cuda.is_available():
        pytest.skip("no cuda")
    assert torch.empty(1).cuda().numel() == 1

'''
HEAD = "import unittest\n\nimport pytest\nimport torch\n\n\n"


def generated(blocks: int) -> str:
    return HEAD + "".join(BLOCK.format(i=i) for i in range(blocks))


def _calls(work: object) -> int:
    """Python and C function calls made by ``work()``: a count of work that load does not change."""
    count = 0

    def profile(frame: object, event: str, arg: object) -> None:
        nonlocal count
        if event in ("call", "c_call"):
            count += 1
    sys.setprofile(profile)
    try:
        work()  # type: ignore[operator]
    finally:
        sys.setprofile(None)
    return count


# -- linear in the size of the file ---------------------------------------------------------------

def test_the_analysis_is_linear_in_the_size_of_the_file() -> None:
    """Four times the file is about four times the work (``ast.get_source_segment`` split the
    whole file again for every gate: 16 times the work, 202 s for 20,000 lines)."""
    small, large = generated(8), generated(32)
    analyze(small, "t.py")  # imports and caches out of the count
    ratio = _calls(lambda: analyze(large, "t.py")) / _calls(lambda: analyze(small, "t.py"))
    assert ratio < 5.5, ratio


# -- line breaks Python does not count ---------------------------------------------------------------

ODD_BREAKS = ["\x0c", "\x0b", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@pytest.mark.parametrize("char", ODD_BREAKS, ids=[f"U+{ord(c):04X}" for c in ODD_BREAKS])
def test_a_character_str_splitlines_breaks_at_does_not_shift_the_lines(char: str) -> None:
    """A form feed, U+2028 or another character ``str.splitlines`` breaks at but Python's
    tokenizer does not: every finding keeps its line and column (the text of a gate as it is)."""
    source = f"import torch\n# a{char}b\ns = 'x{char}y'; x = torch.ones(2).cuda()\n" \
             "y = torch.zeros(1, device='cuda')\n"
    found = [(f.line, f.column, f.code) for f in analyze(source, "t.py").findings]
    assert found == [(3, 30, "DC002"), (4, 27, "DC003")]  # as with any other character there


@pytest.mark.parametrize("char", ODD_BREAKS, ids=[f"U+{ord(c):04X}" for c in ODD_BREAKS])
def test_fix_with_such_a_character_rewrites_and_counts_every_finding(char: str) -> None:
    """The rewrite lands on the nodes the analysis found: with a form feed in a line it once
    added only ``(device)`` to the signature and left the calls (reported as fixed)."""
    pytest.importorskip("libcst", reason="--fix needs the lint extra (pytest-devcaps[lint])")
    from pytest_devcaps.lint.fix import fix_text

    source = textwrap.dedent(f"""\
        import torch
        \x0c

        def test_a():
            s = "a{char}b"; x = torch.ones(2).cuda()  # {char}
            y = torch.zeros(1, device="cuda")
            torch.cuda.synchronize()
        """)
    result = fix_text(source, "test_t.py")
    assert result.after == source.replace("test_a()", "test_a(device, device_runtime)").replace(
        ".cuda()", ".to(device)").replace('device="cuda"', "device=device").replace(
        "torch.cuda.synchronize", "device_runtime.synchronize")
    counts = result.counts()
    assert (counts.found, counts.fixed, counts.left) == ({"DC002": 1, "DC003": 1, "DC004": 1},) * 2 + ({},)


# -- every file through the safe reader -------------------------------------------------------------

def _lint_in_child(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``devcaps lint ARGV`` in a child with 2 GiB of address space and a timeout: a read that
    blocks (a FIFO) fails the test instead of stopping the run, one that never ends (``/dev/zero``)
    stops at the limit instead of at the kernel's out-of-memory killer."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))
    try:
        return subprocess.run([sys.executable, "-m", "pytest_devcaps.commands.main", "lint", *argv],
                              capture_output=True, text=True, timeout=timeout, cwd=ROOT, preexec_fn=limit)
    except subprocess.TimeoutExpired:
        pytest.fail(f"devcaps lint {' '.join(argv)} blocked for {timeout} s instead of refusing a file")


def _refused(done: subprocess.CompletedProcess[str], path: Path, why: str) -> None:
    assert f"{path.as_posix()}:1:1: DC000 cannot read: {why}" in done.stdout, done.stdout + done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_what_is_not_a_regular_file_is_a_finding_and_the_rest_is_checked(tmp_path: Path) -> None:
    """A FIFO (open() blocked forever), a link to ``/dev/zero`` (read until the OOM killer at
    22.8 GB) and a socket in the tree are each one DC000; the tree's other files are checked."""
    os.mkfifo(tmp_path / "pipe.py")
    (tmp_path / "zero.py").symlink_to("/dev/zero")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "sock.py"))
        (tmp_path / "good.py").write_text("x = t.cuda()\n")
        done = _lint_in_child(str(tmp_path))
    assert done.returncode == 2
    _refused(done, tmp_path / "pipe.py", "a FIFO, not a regular file")
    _refused(done, tmp_path / "zero.py", "a character device, not a regular file")
    _refused(done, tmp_path / "sock.py", "a socket, not a regular file")
    assert f"{(tmp_path / 'good.py').as_posix()}:1:7: DC002" in done.stdout
    assert "1 hardcoded device check(s) in 1 file(s) (1 fixable with --fix); 3 file(s) not checked (DC000)" \
        in done.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_a_fifo_named_on_the_command_line_is_refused_not_skipped(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.py")
    done = _lint_in_child(str(tmp_path / "pipe.py"))
    assert done.returncode == 2
    _refused(done, tmp_path / "pipe.py", "a FIFO, not a regular file")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_a_conftest_that_is_a_fifo_does_not_block_the_test_file_next_to_it(tmp_path: Path) -> None:
    """The conftest.py files a test file's fixtures come from are read the same way."""
    os.mkfifo(tmp_path / "conftest.py")
    (tmp_path / "test_a.py").write_text("def test_a(gpu):\n    assert gpu\n")
    done = _lint_in_child(str(tmp_path / "test_a.py"))
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_file_over_the_size_limit_is_refused_naming_the_limit(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """A 9.46 MB file ran to the time cap; over 8 MiB it is one DC000 that says the limit."""
    big, edge = tmp_path / "big.py", tmp_path / "edge.py"
    big.write_bytes(b"x = 1\n" * (MAX_SOURCE_BYTES // 6 + 1))
    edge.write_bytes(b"#" * (MAX_SOURCE_BYTES - 1) + b"\n")  # exactly the limit: read
    assert main(["lint", str(tmp_path)]) == 2
    out = capsys.readouterr().out
    assert f"{big.as_posix()}:1:1: DC000 cannot read: {big.stat().st_size} bytes; files over 8 MiB are not read " \
           "(use: " in out
    assert "edge.py" not in out


def test_a_folder_named_like_a_python_file_is_walked_past(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "pkg.py").mkdir()
    (tmp_path / "pkg.py" / "m.py").write_text("x = 1\n")
    assert main(["lint", str(tmp_path)]) == 0
    assert "2 files checked" not in capsys.readouterr().out  # the folder is no file


def test_an_encoding_error_names_the_codec_the_byte_and_where(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.py"
    bad.write_bytes(b"x = 1\ny = 'ab\xff'\n")
    assert main(["lint", str(bad)]) == 2
    assert f"{bad.as_posix()}:2:1: DC000 cannot decode: 'utf-8' codec can't decode byte 0xff in position 13: " \
           "invalid start byte" in capsys.readouterr().out


# -- recursion limits ----------------------------------------------------------------------------

DEEP = {
    "a 20,000-term expression": "import torch\nx = " + " + ".join(["torch.ones(1).cuda()"] * 20_000) + "\n",
    "a 3,000-call chain": "import torch\nx = torch.ones(1)" + ".cuda()" * 3000 + "\n",
    "a 500-term expression in a test": "import torch\n\n\ndef test_a():\n    x = "
                                       + " + ".join(["torch.ones(1).cuda()"] * 500) + "\n",
    "a 200-call chain in a test": "import torch\n\n\ndef test_a():\n    x = torch.ones(1)" + ".cuda()" * 200 + "\n",
}


@pytest.mark.parametrize("mode", [[], ["--fix"]], ids=["check", "fix"])
@pytest.mark.parametrize("what", list(DEEP))
def test_a_file_deeper_than_the_recursion_limit_is_one_dc000(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             what: str, mode: list[str]) -> None:
    """Python's parser or the lint's walks give up (a RecursionError traceback, exit 1): one
    DC000 for that file, exit 2, and the file is left as it was."""
    pytest.importorskip("libcst", reason="--fix needs the lint extra (pytest-devcaps[lint])")
    deep = tmp_path / "deep.py"
    deep.write_text(DEEP[what])
    (tmp_path / "other.py").write_text("x = t.cuda()\n")
    assert main(["lint", str(tmp_path), *mode]) == 2
    out = capsys.readouterr().out
    assert f"{deep.as_posix()}:1:1: DC000 cannot check: nested too deeply for Python's recursion limit" in out
    assert deep.read_text() == DEEP[what]


def test_a_rewrite_deeper_than_libcst_can_walk_is_refused_not_a_traceback() -> None:
    """LibCST walks its tree with a shallower limit than the analysis: between the two, --fix
    refuses the file (FixError: one line, exit 2) rather than raise RecursionError."""
    pytest.importorskip("libcst", reason="--fix needs the lint extra (pytest-devcaps[lint])")
    from pytest_devcaps.lint.fix import FixError, fix_text

    refused = 0
    for depth in range(100, 400, 25):
        source = "import torch\n\n\ndef test_a():\n    x = " + "f(" * depth + "torch.ones(1).cuda()" + ")" * depth + "\n"
        if not analyze(source, "t.py").readable:
            break
        try:
            fix_text(source, "t.py")
        except FixError as exc:
            assert "nested too deeply to rewrite" in str(exc)
            refused += 1
    assert refused  # at least one depth the analysis reads and LibCST cannot walk


# -- pragmas ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("comment", "why"), [
    ("# devcaps: allow[DC0", "its '[' is never closed"),
    ("# devcaps: allow[DC002", "its '[' is never closed"),
    ("# devcaps: allow[]", "its brackets name no rule"),
    ("# devcaps: allowed", "'allowed' is not 'allow'"),
])
def test_a_malformed_pragma_is_refused_not_a_blanket_allow(comment: str, why: str) -> None:
    """``# devcaps: allow[DC0`` (unclosed) silently allowed every rule on its line."""
    found = [(f.line, f.column, f.code, f.message) for f in analyze(f"x = t.cuda()  {comment}\n", "t.py").findings]
    assert found[0][:3] == (1, 7, "DC002")
    assert found[1][:3] == (1, 15, "DC000") and f"malformed '# devcaps: allow': {why}" in found[1][3]
    assert len(found) == 2


@pytest.mark.parametrize("comment", ["# devcaps: allow", "# devcaps: allow[DC002]", "# devcaps: allow[DC002] (moved later)",
                                     "# devcaps: allow  -- the suite is CUDA's", "#devcaps:allow[DC002, DC003]"])
def test_well_formed_pragmas_still_allow(comment: str) -> None:
    assert analyze(f"x = t.cuda()  {comment}\n", "t.py").findings == ()


def test_a_malformed_pragma_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.py").write_text("x = t.cuda()  # devcaps: allow[DC0\n")
    assert main(["lint", str(tmp_path)]) == 2
    assert "1 hardcoded device check(s) in 1 file(s) (1 fixable with --fix); 1 bad pragma(s) (DC000)" \
        in capsys.readouterr().err


# -- --fix keeps every byte it does not fix ---------------------------------------------------------

ENDINGS = {"CR": "\r", "CRLF": "\r\n", "LF": "\n"}


@pytest.mark.parametrize("final", [True, False], ids=["final line end", "no final line end"])
@pytest.mark.parametrize("ending", list(ENDINGS))
def test_fix_keeps_the_line_ends_of_lines_it_does_not_touch(tmp_path: Path, ending: str, final: bool) -> None:
    """A file with CR-only line ends lost its final ``\\r`` (LibCST's round trip drops it)."""
    pytest.importorskip("libcst", reason="--fix needs the lint extra (pytest-devcaps[lint])")
    end = ENDINGS[ending]
    lines = ["import torch", "", "", "def test_a():", "    x = torch.ones(2).cuda()", "    return x  # \x0c kept"]
    path = tmp_path / "test_a.py"
    path.write_bytes((end.join(lines) + (end if final else "")).encode())
    assert main(["lint", "--fix", str(path)]) == 0
    lines[3:5] = ["def test_a(device):", "    x = torch.ones(2).to(device)"]
    assert path.read_bytes() == (end.join(lines) + (end if final else "")).encode()


def test_fix_on_a_file_with_mixed_line_ends_changes_only_the_lines_it_fixes(tmp_path: Path) -> None:
    pytest.importorskip("libcst", reason="--fix needs the lint extra (pytest-devcaps[lint])")
    path = tmp_path / "test_a.py"
    path.write_bytes(b"import torch\r\n\n\rdef test_a():\r\n    x = torch.ones(2).cuda()\r    return x\r")
    assert main(["lint", "--fix", str(path)]) == 0
    assert path.read_bytes() == b"import torch\r\n\n\rdef test_a(device):\r\n    x = torch.ones(2).to(device)\r" \
                                b"    return x\r"


@pytest.mark.parametrize("original", [
    b"import torch\n\x0c\n\ndef test_a():\n    x = torch.ones(2).cuda()  # \xe2\x80\xa8\n    return x\n",
    b"import torch\r\r\rdef test_a():\r    x = torch.ones(2).cuda()\r    return x\r",
], ids=["form feed and U+2028", "CR line ends"])
def test_diff_is_a_patch_git_applies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str], original: bytes) -> None:
    """``--diff`` splits lines where ``patch`` and ``git apply`` do (at ``\\n`` only): a form feed,
    a U+2028 or a CR no longer cuts a line in two, each part marked "No newline at end of file"."""
    pytest.importorskip("libcst", reason="--fix needs the lint extra (pytest-devcaps[lint])")
    monkeypatch.chdir(tmp_path)
    for name in ("test_a.py", "fixed.py"):
        (tmp_path / name).write_bytes(original)
    assert main(["lint", "--fix", "fixed.py"]) == 0
    assert main(["lint", "--diff", "test_a.py"]) == 1
    patch = capsys.readouterr().out
    assert patch.count("No newline at end of file") == (2 if b"\n" not in original else 0)
    subprocess.run(["git", "init", "-q", "."], check=True)
    subprocess.run(["git", "apply", "-"], input=patch.encode(), check=True)
    assert (tmp_path / "test_a.py").read_bytes() == (tmp_path / "fixed.py").read_bytes() != original


# -- item 4: the device fixture is never shadowed ------------------------------------------------

SHADOWS = {
    "except as": "    try:\n        pass\n    except Exception as device:\n        pass\n",
    "an import": "    from os import sep as device\n",
    "a nested def": "    def device():\n        pass\n",
    "a lambda parameter": "    pick = lambda device: device\n",
    "a module's global read": "    print(device)\n",
}


@pytest.mark.parametrize("what", list(SHADOWS))
def test_a_test_that_binds_or_reads_its_own_device_gets_the_fixture_under_a_free_name(what: str) -> None:
    """``except Exception as device`` (and the others) rebound the ``device`` fixture --fix added,
    so ``.to(device)`` moved the tensor to an exception; a module's ``device`` read in the test
    was replaced by the fixture."""
    pytest.importorskip("libcst", reason="--fix needs the lint extra (pytest-devcaps[lint])")
    from pytest_devcaps.lint.fix import fix_text

    source = f"import torch\ndevice = 'cpu'\n\n\ndef test_a():\n{SHADOWS[what]}    x = torch.ones(2).cuda()\n"
    after = fix_text(source, "test_t.py").after
    assert "def test_a(devcaps_device):" in after and "x = torch.ones(2).to(devcaps_device)" in after
    assert after.replace("(devcaps_device)", "()").replace(".to()", ".cuda()") == source


# -- importpass: LibCST's import visitors over less, with the same result ----------------------------

IMPORT_MODULES = [
    '"""doc"""\nimport os\nimport torch\nx = os.sep\n\n\ndef f():\n    import sys\n    return torch\n',
    "import os\nimport torch\n__all__ = ['os']\n\n\ndef f():\n    return 1\n",
    "x = 1\nimport os\nimport torch\nimport torch.nn as nn\nos = 2\n\n\ndef f(torch):\n    return nn\n",
    "from a import b, c as d\nimport torch.cuda\n\nif d:\n    from a import b\n\n\ndef f() -> 'b':\n    return 1\n",
    "import os\nimport sys\nfrom a import b, c as d\n\n\ndef f():\n    return sys, b\n",  # the short path
    "",
]
REMOVALS = [[("os", None, None), ("a", "c", "d")], [("os", None, None)], [("torch", None, None), ("a", "b", None)], [("a", "c", "d"), ("torch.cuda", None, None)],
            [("torch.nn", None, "nn"), ("os", None, None), ("torch", None, None)]]


@pytest.mark.parametrize("source", IMPORT_MODULES)
def test_the_import_passes_give_what_the_visitors_give_over_the_whole_module(source: str) -> None:
    pytest.importorskip("libcst", reason="--fix needs the lint extra (pytest-devcaps[lint])")
    import libcst as cst
    from libcst.codemod import CodemodContext
    from libcst.codemod.visitors import AddImportsVisitor, RemoveImportsVisitor

    from pytest_devcaps.lint.importpass import add_imports, remove_imports

    module = cst.parse_module(source)
    for wanted in ([("pytest", None)], [("torch", None), ("os", "path")], [("a", "e"), ("a", "b")]):
        whole, head = CodemodContext(), CodemodContext()
        for context in (whole, head):
            for name, obj in wanted:
                if obj is None:
                    AddImportsVisitor.add_needed_import(context, name)
                else:
                    AddImportsVisitor.add_needed_import(context, name, obj)
        assert add_imports(head, module).code == AddImportsVisitor(whole).transform_module(module).code
    for removals in REMOVALS:
        context = CodemodContext()
        for name, obj, asname in removals:
            RemoveImportsVisitor.remove_unused_import(context, name, obj, asname)
        assert remove_imports(module, removals).code == RemoveImportsVisitor(context).transform_module(module).code
    short = cst.parse_module(IMPORT_MODULES[-2])
    assert remove_imports(short, REMOVALS[0]).code.startswith("import sys\nfrom a import b\n")
