"""Bisection over releases: the version list, the scan and its summary (with a TEST DOUBLE
observer standing in for building a release), and reading a real reproducer's output back as a
trace. A real bisection builds each release from crates.io (minutes each): it is run by hand
(`aliasfuzz bisect`), not here.

The tests of this subject that run in-process are in tests/unit/triage/test_bisect.py.
"""

from __future__ import annotations

import subprocess
import sys

from harness.case.case_file import load_case
from harness.targets.registry import open_runner
from harness.targets.reproducers import parse_output, torch_script
from harness.triage.bisect import (
    trace_of_output,
    verdict_words,
)
from tests.conftest import ROOT


def test_a_reproducers_output_reads_back_as_the_targets_verdicts(tmp_path):
    case = ROOT / "tests" / "cases" / "methods_across_step.toml"
    program = load_case(case)
    script = tmp_path / "r.py"
    script.write_text(torch_script(program))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    runner, _ = open_runner(["torch:cpu"])
    try:
        expected = verdict_words(program, runner.run_one(program)["torch:cpu"])
    finally:
        runner.close()
    got = verdict_words(program, trace_of_output(program, parse_output(out.stdout), "torch:script"))
    assert got == expected and {"follows", "keeps"} <= set(got.values())
