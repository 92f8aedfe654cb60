"""Sessions run one after another in one process (pytester's in-process runs, an IDE's runner):
a session must not answer with classes or functions kept from modules a previous session
imported, when those modules were imported again in between (pytester drops the modules an inner
run imported)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent('''
    import sys
    import pytest
    import torch, yaml  # imported once per process (tests/conftest.py says why)
    import pytest_devcaps.plugin  # loaded before the runs, as in the outer pytester session

    before = set(sys.modules)
    args = ["-q", "-p", "no:randomly", "-p", "no:cacheprovider", "--devcaps-devices=cpu", sys.argv[1]]
    first = pytest.main(args)
    for name in set(sys.modules) - before:  # what pytester's snapshot does after an inner run
        del sys.modules[name]
    second = pytest.main([*args, "--devcaps-set=dtype.fp8_e4m3fn=native"])
    print("EXIT", int(first), int(second))
''')

SUITE = textwrap.dedent('''
    import pytest

    @pytest.mark.requires_capability("dtype.fp8_e4m3fn", native=True)
    def test_native_fp8(device):
        pass
''')


def test_a_later_session_reads_its_own_answers_after_our_modules_were_imported_again(tmp_path: Path) -> None:
    """The first session skips (fp8 is emulated on a CPU); the second sets it native and must run
    the test. With the evaluation machinery kept per process, the second session compared the new
    registry's levels with the first import's and skipped a test whose capability it had set."""
    suite = tmp_path / "test_fp8.py"
    suite.write_text(SUITE)
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(suite)], capture_output=True, text=True,
                          timeout=300, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "1 skipped" in done.stdout and "1 passed" in done.stdout, done.stdout
    assert done.stdout.strip().splitlines()[-1] == "EXIT 0 0"
