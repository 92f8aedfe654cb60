"""Issue 29 item 8's hostile-case sweep of ``devcaps lint`` (check, ``--fix``, ``--diff``): files
that are not regular files, too large, undecodable, nested past the recursion limit, 20,000
lines long, with malformed pragmas, odd line ends and line-breaking characters. Each case runs
the command line as a user does (a child process with 4 GiB of address space and a time
limit), and is "ok" when it ends with the expected exit status, says so in one line where it
refuses a file, prints no traceback, and leaves the bytes as expected; anything else is "BAD".
Each line gives the wall time of the case (a shared, loaded machine: an upper bound).

    python benchmarks/hostile_sweep_29_lint.py > benchmarks/results/hostile_sweep_29_lint_<date>_<CPU>.txt
    python benchmarks/hostile_sweep_29_lint.py FIFO CR   # only the cases whose name holds a word
"""

from __future__ import annotations

import os
import platform
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, NamedTuple

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "tests" / "lint"))
from test_hostile import generated  # noqa: E402  (our generated CUDA-only test file)

CLI = [sys.executable, "-m", "pytest_devcaps.commands.main", "lint"]
LIMIT_S = 600
TORCH_CUDA = "torch." + "cuda"  # the repository holds itself to the lint: no CUDA call in this file


class Case(NamedTuple):
    name: str
    files: Callable[[Path], None]  # makes the tree
    argv: list[str]  # after "devcaps lint", relative to the tree
    status: int
    needle: str = ""
    after: Callable[[Path], bool] | None = None  # the tree afterwards is as expected


def _write(name: str, data: bytes) -> Callable[[Path], None]:
    return lambda tree: (tree / name).write_bytes(data)


def _fifo(tree: Path) -> None:
    os.mkfifo(tree / "pipe.py")
    (tree / "good.py").write_text("x = t.cuda()\n")


def _zero(tree: Path) -> None:
    (tree / "zero.py").symlink_to("/dev/zero")
    (tree / "good.py").write_text("x = t.cuda()\n")


def _socket(tree: Path) -> None:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tree / "sock.py"))  # left bound: the file stays a socket while the case runs
    _SOCKETS.append(sock)


_SOCKETS: list[socket.socket] = []


def _conftest_fifo(tree: Path) -> None:
    os.mkfifo(tree / "conftest.py")
    (tree / "test_a.py").write_text("def test_a(gpu):\n    assert gpu\n")


def _loop(tree: Path) -> None:
    (tree / "loop.py").symlink_to("loop.py")


def _folder(tree: Path) -> None:
    (tree / "pkg.py").mkdir()
    (tree / "pkg.py" / "m.py").write_text("x = 1\n")


TEST = ["import torch", "", "", "def test_a():", "    x = torch.ones(2).cuda()", "    return x"]
FIXED = ["import torch", "", "", "def test_a(device):", "    x = torch.ones(2).to(device)", "    return x"]


def _ends(end: str, final: bool, lines: list[str]) -> bytes:
    return (end.join(lines) + (end if final else "")).encode()


def _same(name: str, data: bytes) -> Callable[[Path], bool]:
    return lambda tree: (tree / name).read_bytes() == data


def _unchanged(name: str, make: Callable[[Path], None]) -> Callable[[Path], bool]:
    def check(tree: Path) -> bool:
        with tempfile.TemporaryDirectory() as other:
            make(Path(other))
            return (Path(other) / name).read_bytes() == (tree / name).read_bytes()
    return check


def _odd_break(char: str) -> bytes:
    return (f"import torch\n\x0c\n\ndef test_a():\n    s = 'a{char}b'; x = torch.ones(2).cuda()  # {char}\n"
            f"    y = torch.zeros(1, device=\"cuda\")\n    {TORCH_CUDA}.synchronize()\n").encode()


def _odd_fixed(char: str) -> bytes:
    return (f"import torch\n\x0c\n\ndef test_a(device, device_runtime):\n    s = 'a{char}b'; "
            f"x = torch.ones(2).to(device)  # {char}\n    y = torch.zeros(1, device=device)\n"
            "    device_runtime.synchronize()\n").encode()


def _applies(tree: Path) -> bool:
    """The --diff output (saved by the case) applies with git and gives what --fix gives."""
    subprocess.run(["git", "init", "-q", "."], cwd=tree, check=True)
    done = subprocess.run(["git", "apply", "patch.diff"], cwd=tree, capture_output=True)
    fixed = _ends("\r", True, FIXED)
    return done.returncode == 0 and (tree / "test_a.py").read_bytes() == fixed


DEEP_TERMS = "import torch\nx = " + " + ".join(["torch.ones(1).cuda()"] * 20_000) + "\n"
DEEP_CHAIN = "import torch\nx = torch.ones(1)" + ".cuda()" * 3000 + "\n"
DEEP_CALLS = "import torch\n\n\ndef test_a():\n    x = " + "f(" * 150 + "torch.ones(1).cuda()" + ")" * 150 + "\n"
BIG = generated(770)  # about 20,000 lines
OWN_CUDA = ("import torch\n\n\nclass W:\n    def cuda(self):\n        return self\n\n\n"
            "def test_w():\n    W().cuda()\n")
SHADOWED = ("import torch\n\n\ndef test_a():\n    try:\n        pass\n    except Exception as device:\n"
            "        pass\n    x = torch.ones(2).cuda()\n")
REBOUND = "import torch\nimport types\ntorch = types.SimpleNamespace()\n\n\ndef test_a():\n    " + TORCH_CUDA + ".synchronize()\n"

CASES = [
    Case("a FIFO in the tree (check)", _fifo, ["."], 2, "pipe.py:1:1: DC000 cannot read: a FIFO"),
    Case("a FIFO in the tree (--fix)", _fifo, ["--fix", "."], 2, "pipe.py:1:1: DC000 cannot read: a FIFO"),
    Case("a FIFO named on the command line", _fifo, ["pipe.py"], 2, "DC000 cannot read: a FIFO"),
    Case("a link to /dev/zero (check)", _zero, ["."], 2, "zero.py:1:1: DC000 cannot read: a character device"),
    Case("a link to /dev/zero (--fix)", _zero, ["--fix", "."], 2, "zero.py:1:1: DC000 cannot read: a character device"),
    Case("a socket named *.py", _socket, ["."], 2, "sock.py:1:1: DC000 cannot read: a socket"),
    Case("a conftest.py that is a FIFO", _conftest_fifo, ["test_a.py"], 0, "1 file checked"),
    Case("a loop of links", _loop, ["."], 2, "loop.py:1:1: DC000 cannot resolve"),
    Case("a folder named pkg.py", _folder, ["."], 0, "1 file checked"),
    Case("a 9.46 MB file (check)", _write("big.py", b"x = 1\n" * 1_576_000), ["."], 2, "files over 8 MiB are not read"),
    Case("a 9.46 MB file (--fix)", _write("big.py", b"x = 1\n" * 1_576_000), ["--fix", "."], 2, "files over 8 MiB are not read"),
    Case("a file of exactly 8 MiB", _write("edge.py", b"#" * (8 * 2**20 - 1) + b"\n"), ["."], 0, "1 file checked"),
    Case("an undecodable byte", _write("bad.py", b"x = 1\ny = '\xff'\n"), ["."], 2, "bad.py:2:1: DC000 cannot decode: 'utf-8' codec"),
    Case("an unknown # coding:", _write("bad.py", b"# coding: nope\nx = 1\n"), ["."], 2, "DC000 cannot decode: unknown encoding: nope"),
    Case("a NUL byte", _write("bad.py", b"x = 1\x00\n"), ["."], 2, "DC000 cannot parse"),
    Case("a 20,000-term expression (check)", _write("deep.py", DEEP_TERMS.encode()), ["."], 2, "DC000 cannot check: nested too deeply"),
    Case("a 20,000-term expression (--fix)", _write("deep.py", DEEP_TERMS.encode()), ["--fix", "."], 2, "DC000 cannot check: nested too deeply",
         _same("deep.py", DEEP_TERMS.encode())),
    Case("a 3,000-call chain (check)", _write("deep.py", DEEP_CHAIN.encode()), ["."], 2, "DC000 cannot check: nested too deeply"),
    Case("a 3,000-call chain (--fix)", _write("deep.py", DEEP_CHAIN.encode()), ["--fix", "."], 2, "DC000 cannot check: nested too deeply",
         _same("deep.py", DEEP_CHAIN.encode())),
    Case("150 nested calls (--fix: deeper than LibCST walks)", _write("deep.py", DEEP_CALLS.encode()), ["--fix", "."], 2,
         "nested too deeply", _same("deep.py", DEEP_CALLS.encode())),
    Case("# devcaps: allow[DC0 (unclosed)", _write("a.py", b"x = t.cuda()  # devcaps: allow[DC0\n"), ["."], 2,
         "its '[' is never closed"),
    Case("# devcaps: allow[] (empty)", _write("a.py", b"x = t.cuda()  # devcaps: allow[]\n"), ["."], 2, "name no rule"),
    Case("# devcaps: allowed (not the word)", _write("a.py", b"x = t.cuda()  # devcaps: allowed\n"), ["."], 2,
         "'allowed' is not 'allow'"),
    *(Case(f"--fix, {name} line ends{'' if final else ', none at the end'}", _write("test_a.py", _ends(end, final, TEST)),
           ["--fix", "."], 0, "fixed 1 finding(s) in 1 file(s); 0 left", _same("test_a.py", _ends(end, final, FIXED)))
      for name, end in (("CR", "\r"), ("CRLF", "\r\n"), ("LF", "\n")) for final in (True, False)),
    Case("--fix, mixed line ends", _write("test_a.py", b"import torch\r\n\n\rdef test_a():\r\n    x = torch.ones(2).cuda()\r    return x\r"),
         ["--fix", "."], 0, "0 left",
         _same("test_a.py", b"import torch\r\n\n\rdef test_a(device):\r\n    x = torch.ones(2).to(device)\r    return x\r")),
    Case("--fix, a BOM and CRLF", _write("test_a.py", b"\xef\xbb\xbf" + _ends("\r\n", True, TEST)), ["--fix", "."], 0, "0 left",
         _same("test_a.py", b"\xef\xbb\xbf" + _ends("\r\n", True, FIXED))),
    *(Case(f"--fix, U+{ord(char):04X} in a line", _write("test_a.py", _odd_break(char)), ["--fix", "."], 0,
           "found 3 (DC002 1, DC003 1, DC004 1); fixed 3 (DC002 1, DC003 1, DC004 1); left 0", _same("test_a.py", _odd_fixed(char)))
      for char in ("\x0c", "\x0b", "\x1c", "\x85", "\u2028", "\u2029")),
    Case("--diff of a CR file applies with git", _write("test_a.py", _ends("\r", True, TEST)), ["--diff", "test_a.py"], 1,
         "@@", _applies),
    Case("item 4: a class's own .cuda() is not .to(device)", _write("test_w.py", OWN_CUDA.encode()), ["--fix", "."], 1,
         "1 left", _same("test_w.py", OWN_CUDA.encode())),
    Case("item 4: except ... as device does not shadow the fixture", _write("test_a.py", SHADOWED.encode()), ["--fix", "."], 0,
         "0 left", _same("test_a.py", SHADOWED.replace("test_a()", "test_a(devcaps_device)").replace(
             ".cuda()", ".to(devcaps_device)").encode())),
    Case("item 4: torch rebound to another object is not torch", _write("test_a.py", REBOUND.encode()), ["--fix", "."], 0,
         "fixed 0 finding(s) in 0 file(s); 0 left", _same("test_a.py", REBOUND.encode())),
    Case("a 20,000-line file (check)", _write("test_big.py", BIG.encode()), ["."], 1, "hardcoded device check(s) in 1 file(s)",
         _same("test_big.py", BIG.encode())),
    Case("a 20,000-line file (--fix)", _write("test_big.py", BIG.encode()), ["--fix", "."], 0, "fixed ",
         lambda tree: (tree / "test_big.py").read_text() != BIG and "torch.accelerator" in (tree / "test_big.py").read_text()),
]


def run_case(case: Case) -> bool:
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp)
        case.files(tree)

        def limit() -> None:
            resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, 4 * 2**30))
        started = time.perf_counter()
        try:
            done = subprocess.run([*CLI, *case.argv], cwd=tree, capture_output=True, timeout=LIMIT_S,
                                  preexec_fn=limit)  # bytes: a patch keeps its \r
        except subprocess.TimeoutExpired:
            print(f"BAD {case.name}: still running after {LIMIT_S} s")
            return False
        took = time.perf_counter() - started
        if case.argv[0] == "--diff":
            (tree / "patch.diff").write_bytes(done.stdout)
        output = (done.stdout + done.stderr).decode("utf-8", "replace")
        errors = [line for line in output.splitlines() if " DC000 " in line or line.startswith("devcaps: error:")]
        good = (done.returncode == case.status and "Traceback" not in output and case.needle in output
                and (case.status != 2 or len(errors) == 1) and (case.after is None or case.after(tree)))
        shown = errors[0] if errors else (done.stderr.decode("utf-8", "replace").strip().splitlines() or [""])[-1]
        print(f"{'ok ' if good else 'BAD'} {case.name}: exit {done.returncode} (expected {case.status}) "
              f"in {took:.1f} s: {shown[:150]}", flush=True)
        for sock in _SOCKETS:
            sock.close()
        _SOCKETS.clear()
        return good


def main() -> None:
    print(f"# issue 29 item 8: devcaps lint on hostile files; python {platform.python_version()}; "
          f"{platform.machine()}; time limit {LIMIT_S} s a case")
    wanted = sys.argv[1:]  # optional: only the cases whose name holds one of these
    results = [run_case(case) for case in CASES if not wanted or any(w in case.name for w in wanted)]
    print(f"# {len(results)} cases, {results.count(False)} bad")
    sys.exit(1 if not all(results) else 0)


if __name__ == "__main__":
    main()
