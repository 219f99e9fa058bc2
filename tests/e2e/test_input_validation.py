"""Hostile input: every malformed case, program or baseline is refused before anything runs, with
one line naming the file and the field (exit status 2 on the command line), never a traceback,
a hang or a run that quietly checks nothing.

Cases and baselines are real files; where the command line is involved it runs in a real
process (``tests.conftest.run_cli``), on ``torch:cpu``, which needs no Rust probe.

The tests of this subject that run in-process are in tests/unit/case/test_input_validation.py.
"""

from __future__ import annotations

import os
import resource
import subprocess

import pytest

from tests.conftest import PY, ROOT
from tests.support.input_validation import one_line_exit_2

# -- 3. case paths that are not regular files, and size ------------------------------------------


def _limited(*args: str, timeout: float) -> subprocess.CompletedProcess:
    """The command line with its address space capped at 4 GiB: reading /dev/zero whole (the old
    behaviour) then ends in a MemoryError, not in the OOM killer taking the machine's processes."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    return subprocess.run(
        [PY, "-m", "harness.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, preexec_fn=cap
    )


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
@pytest.mark.parametrize("command", ["repro", "minimize"])
def test_dev_zero_is_refused_without_reading_it(command: str):
    line = one_line_exit_2(_limited(command, "/dev/zero", "--targets", "torch:cpu", timeout=60), "/dev/zero")
    assert "not a regular file (a character device)" in line
