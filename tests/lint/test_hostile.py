"""Issue 29 item 8: ``devcaps lint`` on hostile files. Every file is read through the safe reader
(regular files only, a size cap, encoding errors named), the work is linear in the size of the
file, recursion limits are a one-line DC000, a malformed pragma is refused, and ``--fix`` keeps
every byte it does not fix and counts only what it changed."""

from __future__ import annotations

import sys
import textwrap

import pytest

from pytest_devcaps.lint import analyze

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
