"""The command line under careless or hostile use: closed pipes, full devices, Ctrl-C, options out
of range, resumes that would change the campaign. Real processes throughout; where a campaign is
needed, the TEST DOUBLE fake probe (tests/fakes/) stands in as the ``candle`` binary through
``ALIASFUZZ_PROBE_DIR`` (harness logic under test, never a framework stand-in).

The tests of this subject that run in-process are in tests/unit/cli/test_cli_reliability.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import CASES, PY, ROOT, run_cli
from tests.support.fake_targets import probe_dir as _probe_dir

CASE = CASES / "example_sgd_snapshots.toml"


def _fuzz_argv(out: Path, *extra: str) -> list[str]:
    return [
        PY,
        "-m",
        "harness.cli",
        "fuzz",
        "--seed",
        "7",
        "--profile",
        "quick",
        "--targets",
        "candle",
        "--shrink-time",
        "3",
        "--chunk-size",
        "16",
        "--out",
        str(out),
        *extra,
    ]


def _env(tmp_path: Path, *flags: str) -> dict:
    return {**os.environ, "ALIASFUZZ_PROBE_DIR": str(_probe_dir(tmp_path, *flags))}


def _one_line(stderr: str) -> str:
    lines = [text for text in stderr.strip().splitlines() if text.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


# -- standard output that goes away -------------------------------------------------------------


def test_a_closed_pipe_does_not_end_the_campaign_early(tmp_path: Path):
    out = tmp_path / "run"
    proc = subprocess.Popen(
        _fuzz_argv(out, "--max-programs", "96"),
        cwd=ROOT,
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.readline()  # `| head -1`: read one line, then close the pipe
    proc.stdout.close()
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err.decode()  # the planted divergence is new
    assert b"Traceback" not in err and b"Exception ignored" not in err
    state = json.loads((out / "campaign.json").read_text())
    assert state["programs"] >= 96
    assert (out / "report.md").exists() and (out / "report.html").exists()


@pytest.mark.parametrize("command", ["targets", "repro", "fuzz"])
def test_stdout_on_a_full_device_is_one_line_exit_2(tmp_path: Path, command: str):
    argv = {
        "targets": ["targets"],
        "repro": ["repro", str(CASE), "--targets", "torch:cpu"],
        "fuzz": _fuzz_argv(tmp_path / "run", "--max-programs", "16")[3:],
    }[command]
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [PY, "-m", "harness.cli", *argv],
            cwd=ROOT,
            env=_env(tmp_path),
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
        )
    assert result.returncode == 2, result.stderr
    lines = [text for text in result.stderr.splitlines() if text.startswith("aliasfuzz:")]
    assert "Traceback" not in result.stderr and lines and "standard output" in lines[-1], result.stderr
    if command == "fuzz":  # the campaign itself ran to its end
        assert json.loads((tmp_path / "run" / "campaign.json").read_text())["programs"] >= 16


# -- Ctrl-C and SIGTERM --------------------------------------------------------------------------


@pytest.mark.parametrize("workers", ["1", "2"])
def test_ctrl_c_saves_the_state_writes_the_report_and_prints_no_traceback(tmp_path: Path, workers: str):
    out = tmp_path / "run"
    # SIGINT as a terminal leaves it: a suite started in the background (`make test &`, nohup)
    # runs with SIGINT ignored, which children inherit, and Python then never raises
    # KeyboardInterrupt.
    proc = subprocess.Popen(
        _fuzz_argv(out, "--budget", "10m", "--workers", workers),
        cwd=ROOT,
        env=_env(tmp_path, "--slow-ms", "20"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (out / "campaign.json").exists():
        time.sleep(0.5)
    time.sleep(8)
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole process group
    started = time.monotonic()
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # a campaign that did not stop is not left running
        raise
    assert time.monotonic() - started < 30
    assert proc.returncode == 2
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 3, err
    assert "interrupted" in err and "--resume" in err
    state = json.loads((out / "campaign.json").read_text())
    assert state["runs"][-1]["interrupted"] is True
    assert (out / "report.md").exists()


def test_sigterm_ends_a_campaign_as_ctrl_c_does(tmp_path: Path):
    out = tmp_path / "run"
    proc = subprocess.Popen(
        _fuzz_argv(out, "--budget", "10m"),
        cwd=ROOT,
        env=_env(tmp_path, "--slow-ms", "20"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (out / "campaign.json").exists():
        time.sleep(0.5)
    time.sleep(5)
    proc.terminate()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "Traceback" not in err and "interrupted" in err
    assert json.loads((out / "campaign.json").read_text())["runs"][-1]["interrupted"] is True


@pytest.mark.parametrize("flags", [["--seed", "8"], ["--targets", "torch"], ["--profile", "deep"]])
def test_resume_refuses_options_that_would_make_it_another_campaign(tmp_path: Path, flags):
    out = tmp_path / "run"
    first = subprocess.run(
        _fuzz_argv(out, "--max-programs", "16"),
        cwd=ROOT,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert first.returncode in (0, 1), first.stderr
    before = (out / "campaign.json").read_text()
    result = subprocess.run(
        [PY, "-m", "harness.cli", "fuzz", "--resume", str(out), "--max-programs", "32", *flags],
        cwd=ROOT,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2 and flags[0] in _one_line(result.stderr)
    assert (out / "campaign.json").read_text() == before


# -- minimize -----------------------------------------------------------------------------------


def test_minimize_exit_status_follows_the_readme(tmp_path: Path):
    # One target: nothing can diverge, nothing is kept: 0 (as "nothing diverged").
    out = tmp_path / "m.toml"
    result = run_cli("minimize", str(CASE), "--targets", "torch:cpu", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert not out.exists()


def test_minimize_of_dev_stdin_writes_nothing_beside_it(tmp_path: Path):
    with open(CASE) as f:  # a regular file behind /dev/stdin: it still has no folder of its own
        result = subprocess.run(
            [PY, "-m", "harness.cli", "minimize", "/dev/stdin", "--targets", "torch:cpu"],
            cwd=ROOT,
            stdin=f,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 2 and "--out" in _one_line(result.stderr)
    assert not Path("/dev/stdin.min.toml").exists()


def test_programs_that_every_target_failed_are_counted_never_agreement(tmp_path: Path):
    # Both fake devices fail every program: nothing can be compared, and "0 new" must say so.
    out = tmp_path / "run"
    result = subprocess.run(
        _fuzz_argv(out, "--max-programs", "32"),
        cwd=ROOT,
        env=_env(tmp_path, "--fail-always"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr
    assert "nothing was compared" in result.stderr.strip().splitlines()[-1]
    state = json.loads((out / "campaign.json").read_text())
    assert state["ran_nowhere"] >= 32 - state.get("repeats_skipped", 0) > 0
    assert "ran on no target" in result.stderr
    assert "programs no target ran" in (out / "report.md").read_text()
