"""pytest_devcaps.lint.writer: ``devcaps lint --fix`` reads without blocking and writes atomically,
keeping mode, owner, encoding, BOM and line endings; it never follows a link out of the tree it
was given and never overwrites a file that changed while the lint ran.

Every hostile input is our own: links out of the tree, a FIFO (read in a child process with a
timeout, so a hang fails the test instead of stopping the run), a device, a CRLF file with a BOM,
a file edited between read and write, a read-only folder (as an unprivileged user when the tests
run as root, since root ignores permission bits)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Iterator

import pytest

from pytest_devcaps.errors import DevcapsError
from pytest_devcaps.lint import writer
from pytest_devcaps.lint.writer import (
    FileChangedError,
    LintWriteError,
    OutsideTreeError,
    read_source,
    read_source_text,
    write_source,
)

NOBODY = 65534
ROOT = Path(__file__).resolve().parents[2]


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_errors_are_devcaps_errors() -> None:
    for error in (LintWriteError, OutsideTreeError, FileChangedError):
        assert issubclass(error, DevcapsError)


def test_crlf_and_bom_survive_a_rewrite_that_adds_lf_lines(tmp_path: Path) -> None:
    path = tmp_path / "t.py"
    path.write_bytes(b"\xef\xbb\xbfimport torch\r\nx = torch.cuda.is_available()\r\n")
    snap = read_source(path, root=tmp_path)
    assert snap.encoding == "utf-8-sig" and snap.newline == "\r\n"
    text = snap.text()
    assert text == "import torch\r\nx = torch.cuda.is_available()\r\n"
    new = text.replace("import torch\r\n", "import torch\n\ndevice_type = 'cpu'\n")
    assert write_source(snap, new, root=tmp_path) is True
    assert path.read_bytes() == (b"\xef\xbb\xbfimport torch\r\n\r\ndevice_type = 'cpu'\r\n"
                                 b"x = torch.cuda.is_available()\r\n")
    assert _leftovers(tmp_path) == []


def test_a_text_that_kept_its_bom_does_not_get_two(tmp_path: Path) -> None:
    path = tmp_path / "t.py"
    path.write_bytes(b"\xef\xbb\xbfx = 1\n")
    snap = read_source(path)
    write_source(snap, "\ufeffx = 2\n")
    assert path.read_bytes() == b"\xef\xbb\xbfx = 2\n"


def test_mixed_line_endings_are_left_as_the_rewrite_made_them(tmp_path: Path) -> None:
    path = tmp_path / "t.py"
    path.write_bytes(b"a = 1\r\nb = 2\n")
    snap = read_source(path)
    assert snap.newline is None
    write_source(snap, "a = 1\r\nb = 3\n")
    assert path.read_bytes() == b"a = 1\r\nb = 3\n"


def test_a_coding_declaration_is_kept_and_an_unencodable_character_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.py"
    original = "# -*- coding: latin-1 -*-\nname = 'caf\xe9'\n".encode("latin-1")
    path.write_bytes(original)
    snap = read_source(path)
    assert snap.encoding == "iso-8859-1"
    write_source(snap, snap.text().replace("name", "label"))
    assert path.read_bytes() == original.replace(b"name", b"label")
    snap = read_source(path)
    with pytest.raises(LintWriteError, match="t.py:2: the new text has '\u2192', which the file's encoding"):
        write_source(snap, snap.text().replace("caf\xe9", "\u2192"))
    assert path.read_bytes() == original.replace(b"name", b"label")


def test_undecodable_bytes_are_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "t.py"
    path.write_bytes(b"x = 1\ny = '\xff'\n")
    with pytest.raises(LintWriteError, match=r"t.py:2: cannot decode as utf-8"):
        read_source(path).text()


def test_mode_and_owner_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "t.py"
    path.write_text("x = 1\n")
    os.chmod(path, 0o751)
    if os.geteuid() == 0:  # only root can hand a file to another user; check that is kept too
        os.chown(path, NOBODY, NOBODY)
    before = os.stat(path)
    write_source(read_source(path), "x = 2\n")
    after = os.stat(path)
    assert path.read_text() == "x = 2\n"
    assert stat.S_IMODE(after.st_mode) == 0o751
    assert (after.st_uid, after.st_gid) == (before.st_uid, before.st_gid)
    assert after.st_ino != before.st_ino  # replaced by a rename, not written in place


def test_an_unchanged_text_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "t.py"
    path.write_bytes(b"x = 1\r\n")
    before = os.stat(path)
    snap = read_source(path)
    assert write_source(snap, "x = 1\n") is False  # LF from the rewrite, CRLF on disk: same bytes
    assert os.stat(path).st_ino == before.st_ino


def _tree_with_outside_link(tmp_path: Path) -> tuple[Path, Path, Path]:
    tree, outside = tmp_path / "tree", tmp_path / "outside"
    tree.mkdir()
    outside.mkdir()
    target = outside / "victim.py"
    target.write_text("import torch\nx = torch.cuda.is_available()\n")
    return tree, outside, target


def test_a_link_out_of_the_tree_is_never_followed(tmp_path: Path) -> None:
    tree, _, target = _tree_with_outside_link(tmp_path)
    (tree / "link.py").symlink_to(target)
    with pytest.raises(OutsideTreeError, match=r"link.py: resolves to .*victim.py, outside"):
        read_source(tree / "link.py", root=tree)
    snap = read_source(tree / "link.py")  # read without a tree (e.g. by another caller) ...
    with pytest.raises(OutsideTreeError):  # ... is still never written outside the tree
        write_source(snap, "x = 2\n", root=tree)
    assert target.read_text().startswith("import torch")


def test_a_folder_link_out_of_the_tree_is_refused(tmp_path: Path) -> None:
    tree, outside, target = _tree_with_outside_link(tmp_path)
    (tree / "sub").symlink_to(outside, target_is_directory=True)
    with pytest.raises(OutsideTreeError):
        read_source(tree / "sub" / "victim.py", root=tree)


def test_a_file_named_on_the_command_line_is_its_folder_s_tree(tmp_path: Path) -> None:
    tree, _, target = _tree_with_outside_link(tmp_path)
    link = tree / "link.py"
    link.symlink_to(target)
    with pytest.raises(OutsideTreeError):  # `devcaps lint --fix tree/link.py`
        read_source(link, root=link)


def test_a_link_inside_the_tree_is_written_through_and_stays_a_link(tmp_path: Path) -> None:
    real = tmp_path / "real.py"
    real.write_text("x = 1\n")
    link = tmp_path / "link.py"
    link.symlink_to("real.py")
    write_source(read_source(link, root=tmp_path), "x = 2\n", root=tmp_path)
    assert link.is_symlink() and os.readlink(link) == "real.py"
    assert real.read_text() == "x = 2\n"


def test_a_loop_of_links_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "a.py").symlink_to("b.py")
    (tmp_path / "b.py").symlink_to("a.py")
    with pytest.raises(LintWriteError, match="a.py: cannot resolve"):
        read_source(tmp_path / "a.py", root=tmp_path)


def _read_in_child(path: Path, timeout: float = 60) -> dict[str, str]:
    """read_source(path) in a child process: a read that blocks is killed, not waited for."""
    code = textwrap.dedent("""
        import json, sys
        from pytest_devcaps.lint.writer import LintWriteError, read_source
        try:
            read_source(sys.argv[1])
        except LintWriteError as exc:
            print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
        else:
            print(json.dumps({"error": None}))
    """)
    try:
        done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                              timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"reading {path} blocked for {timeout} s instead of being refused")
    assert done.returncode == 0, done.stderr
    result: dict[str, str] = json.loads(done.stdout)
    return result


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)
    result = _read_in_child(fifo)
    assert result["error"] == "LintWriteError"
    assert "a FIFO, not a regular file" in result["message"]


def test_a_link_to_a_fifo_is_refused_too(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    (tmp_path / "pipe.py").symlink_to(fifo)
    assert "a FIFO" in _read_in_child(tmp_path / "pipe.py")["message"]


def test_a_device_is_refused(tmp_path: Path) -> None:
    (tmp_path / "zero.py").symlink_to("/dev/zero")
    result = _read_in_child(tmp_path / "zero.py")
    assert "a character device, not a regular file" in result["message"]


def test_a_file_over_the_limit_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.py"
    path.write_bytes(b"#" * 1001)
    with pytest.raises(LintWriteError, match="1001 bytes; files over 1000 bytes are not read"):
        read_source(path, 1000)
    assert len(read_source(path, 1001).data) == 1001


def test_a_file_edited_while_the_lint_ran_is_not_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "t.py"
    path.write_text("x = 1\n")
    snap = read_source(path)
    path.write_text("x = 9\n")  # same size; the mtime is put back, so only the content tells
    os.utime(path, ns=(snap.mtime_ns, snap.mtime_ns))
    with pytest.raises(FileChangedError, match="t.py: changed while devcaps lint ran"):
        write_source(snap, "x = 2\n")
    assert path.read_text() == "x = 9\n"
    assert _leftovers(tmp_path) == []


def test_a_file_replaced_while_the_lint_ran_is_not_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "t.py"
    path.write_text("x = 1\n")
    snap = read_source(path)
    (tmp_path / "new").write_text("x = 1  # an editor saved this\n")
    os.replace(tmp_path / "new", path)
    with pytest.raises(FileChangedError):
        write_source(snap, "x = 2\n")
    assert path.read_text().endswith("saved this\n")


def test_a_file_that_became_a_fifo_is_not_replaced(tmp_path: Path) -> None:
    path = tmp_path / "t.py"
    path.write_text("x = 1\n")
    snap = read_source(path)
    path.unlink()
    os.mkfifo(path)
    with pytest.raises(FileChangedError):
        write_source(snap, "x = 2\n")
    assert stat.S_ISFIFO(os.lstat(path).st_mode)


def test_the_change_check_runs_after_the_new_file_is_complete(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """An edit that lands while the new file is written (after the first look) is still caught:
    the comparison runs on the finished temporary file, just before the rename."""
    path = tmp_path / "t.py"
    path.write_text("x = 1\n")
    snap = read_source(path)
    original = writer._check_unchanged

    def edit_then_check(snapshot: writer.SourceSnapshot) -> None:
        path.write_text("x = 7\n")
        original(snapshot)

    monkeypatch.setattr(writer, "_check_unchanged", edit_then_check)
    with pytest.raises(FileChangedError):
        write_source(snap, "x = 2\n")
    assert path.read_text() == "x = 7\n"
    assert _leftovers(tmp_path) == []


@pytest.fixture
def reachable(tmp_path: Path) -> Iterator[Path]:
    """A folder the unprivileged writer can reach: tmp_path, or under root a fresh folder in the
    system temp folder (pytest's own is private to root) that nobody may enter."""
    if os.geteuid() != 0:
        yield tmp_path
        return
    folder = Path(tempfile.mkdtemp(prefix="devcaps-writer-"))
    os.chmod(folder, 0o755)
    try:
        yield folder
    finally:
        for item in folder.rglob("*"):
            if item.is_dir():
                os.chmod(item, 0o755)
        shutil.rmtree(folder)


def _attempt(path: Path) -> dict[str, str]:
    try:
        write_source(read_source(path), "x = 2\n")
    except LintWriteError as exc:
        return {"error": type(exc).__name__, "message": str(exc)}
    return {"error": ""}


def _write_unprivileged(path: Path) -> dict[str, str]:
    """write_source as a user that permission bits apply to: this user, or, under root, a forked
    child that became nobody (root ignores permission bits; the venv may be unreadable to
    nobody, so the child runs the code already loaded instead of a new interpreter)."""
    if os.geteuid() != 0:
        return _attempt(path)
    for item in (path.parent, path):
        os.chown(item, NOBODY, NOBODY)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        code = 1
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            os.write(write_end, json.dumps(_attempt(path)).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        data = reader.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and data, "the unprivileged child failed"
    result: dict[str, str] = json.loads(data)
    return result


def test_a_read_only_folder_is_a_clear_error_and_the_file_is_kept(reachable: Path) -> None:
    folder = reachable / "ro"
    folder.mkdir()
    path = folder / "t.py"
    path.write_text("x = 1\n")
    os.chmod(path, 0o644)
    os.chmod(folder, 0o555)
    try:
        result = _write_unprivileged(path)
    finally:
        os.chmod(folder, 0o755)
    assert result["error"] == "LintWriteError"
    assert "cannot write: Permission denied" in result["message"]
    assert "the file is unchanged" in result["message"]
    assert path.read_text() == "x = 1\n"
    assert _leftovers(folder) == []


def test_a_read_only_file_is_not_replaced(reachable: Path) -> None:
    folder = reachable / "rw"
    folder.mkdir()
    path = folder / "t.py"
    path.write_text("x = 1\n")
    os.chmod(path, 0o444)
    result = _write_unprivileged(path)
    assert result["error"] == "LintWriteError"
    assert "not writable by this user (mode 444)" in result["message"]
    assert path.read_text() == "x = 1\n"


def test_a_20000_line_crlf_file_is_rewritten_whole(tmp_path: Path) -> None:
    """Correctness at the issue's size; the time is measured by benchmarks/bench_lint_writer.py."""
    path = tmp_path / "big.py"
    lines = [f"x{i} = torch.cuda.is_available()  # é {i}" for i in range(20_000)]
    path.write_bytes("\r\n".join(lines).encode("utf-8") + b"\r\n")
    snap = read_source(path, root=tmp_path)
    new = snap.text().replace("\r\n", "\n").replace("torch.cuda.", "torch.accelerator.")
    assert write_source(snap, new, root=tmp_path)
    data = path.read_bytes()
    assert data.count(b"\r\n") == 20_000 and data.count(b"\n") == 20_000
    assert data.count(b"torch.accelerator.is_available()") == 20_000


def test_the_drop_in_text_reader_reports_instead_of_raising(tmp_path: Path) -> None:
    good, bad, unknown = tmp_path / "good.py", tmp_path / "bad.py", tmp_path / "unknown.py"
    good.write_bytes(b"\xef\xbb\xbfx = 'caf\xc3\xa9'\r\n")
    bad.write_bytes(b"x = 1\ny = '\xff'\n")
    unknown.write_bytes(b"# coding: no-such-codec\nx = 1\n")
    assert read_source_text(good) == "x = 'caf\xe9'\r\n"
    refused = read_source_text(bad)
    assert isinstance(refused, tuple) and refused[:2] == (2, 1)
    assert refused[2].startswith("cannot decode: 'utf-8' codec")
    refused = read_source_text(unknown)
    assert isinstance(refused, tuple) and refused[2] == "cannot decode: unknown encoding: no-such-codec"
    assert read_source_text(tmp_path / "missing.py") == (1, 1, "cannot resolve: No such file or directory")
    os.mkfifo(tmp_path / "pipe.py")
    code = ("import sys; from pytest_devcaps.lint.writer import read_source_text; "
            "print(read_source_text(sys.argv[1]))")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "pipe.py")], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)
    assert done.stdout.strip() == "(1, 1, 'cannot read: a FIFO, not a regular file; devcaps lint reads only regular files')"
