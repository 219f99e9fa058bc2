"""Shared fixtures: real targets, started once per test session."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "cases"
PY = sys.executable


def run_cli(*args: str, env: dict | None = None, timeout: float = 600, cwd=ROOT) -> subprocess.CompletedProcess:
    """Runs the real ``aliasfuzz`` command line in a subprocess."""
    return subprocess.run([PY, "-m", "harness.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


@pytest.fixture(scope="session", autouse=True)
def bug_reports_in_a_temporary_folder(tmp_path_factory):
    """Bug reports of aliasfuzz itself (``harness_errors.write_bug_report``) that a test provokes
    go to a temporary folder, never into the checkout's reports/ (subprocesses inherit it)."""
    os.environ["ALIASFUZZ_BUG_DIR"] = str(tmp_path_factory.mktemp("bug-reports"))


@pytest.fixture(scope="session")
def all_targets():
    """Every target this machine offers, opened once. Fails (never skips) when a probe is missing:
    `make test` builds them first."""
    from harness.targets.registry import discover

    found = discover()
    if found.unavailable:
        found.close()
        pytest.fail(f"targets unavailable: {found.unavailable} (run `make probes`)")
    yield found
    found.close()


@pytest.fixture(scope="session")
def runner(all_targets):
    from harness.targets.runner import Runner

    r = Runner(all_targets.targets)
    yield r
