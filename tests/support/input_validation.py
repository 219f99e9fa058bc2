"""What both tiers of the input validation tests share: ``one_line_exit_2``, ``refused``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from harness.case.case_file import load_case
from harness.case.ir import CaseError


def one_line_exit_2(result: subprocess.CompletedProcess, *fragments: str) -> str:
    """Asserts the command line refused its input the way the README says, and returns the line."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and result.stdout == "", result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("aliasfuzz: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def refused(path: Path, where: str, fragment: str) -> str:
    """Asserts ``load_case`` refuses ``path`` with a one-line ``CaseError`` naming it and ``where``."""
    with pytest.raises(CaseError) as info:
        load_case(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and "\n" not in message, message
    assert f": {where}: " in message and fragment in message, message
    return message
