"""The command line under careless or hostile use: closed pipes, full devices, Ctrl-C, options out
of range, resumes that would change the campaign. Real processes throughout; where a campaign is
needed, the TEST DOUBLE fake probe (tests/fakes/) stands in as the ``candle`` binary through
``ALIASFUZZ_PROBE_DIR`` (harness logic under test, never a framework stand-in).

The tests here run in this process (the command line through ``run_cli_in_process``), as the
unit tier requires; those that need real processes are in tests/e2e/test_cli_reliability.py.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.conftest import CASES, run_cli_in_process

CASE = CASES / "example_sgd_snapshots.toml"


def _one_line(stderr: str) -> str:
    lines = [text for text in stderr.strip().splitlines() if text.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


# -- options ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "flags,fragment",
    [
        (["--max-programs", "-5"], "--max-programs"),
        (["--max-programs", "0"], "--max-programs"),
        (["--max-programs", "10", "--shrink-time", "-1"], "--shrink-time"),
        (["--max-programs", "10", "--shrink-time", "nan"], "--shrink-time"),
        (["--max-programs", "10", "--shrink-grace", "inf"], "--shrink-grace"),
    ],
)
def test_fuzz_options_out_of_range_are_one_line_exit_2(tmp_path: Path, flags, fragment):
    out = tmp_path / "run"
    result = run_cli_in_process("fuzz", "--targets", "torch:cpu", "--out", str(out), *flags, timeout=120)
    assert result.returncode == 2 and fragment in _one_line(result.stderr)
    assert not out.exists()


@pytest.mark.parametrize("value", ["-1", "nan", "0"])
def test_minimize_time_out_of_range_is_one_line_exit_2(tmp_path: Path, value: str):
    result = run_cli_in_process(
        "minimize", str(CASE), "--targets", "torch:cpu", "--time", value, "--out", str(tmp_path / "m.toml")
    )
    assert result.returncode == 2 and "--time" in _one_line(result.stderr)


def test_minimize_checks_out_before_minimizing(tmp_path: Path):
    folder = tmp_path / "a-folder"
    folder.mkdir()
    started = time.monotonic()
    result = run_cli_in_process("minimize", str(CASE), "--targets", "torch:cpu", "--out", str(folder))
    assert result.returncode == 2 and "--out" in _one_line(result.stderr)
    assert result.stdout == "" and time.monotonic() - started < 60
    result = run_cli_in_process(
        "minimize", str(CASE), "--targets", "torch:cpu", "--out", str(tmp_path / "no" / "m.toml")
    )
    assert result.returncode == 2 and "does not exist" in _one_line(result.stderr)
