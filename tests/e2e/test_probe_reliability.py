"""Reliability of the probe client and the runner: every wait is bounded, and a missing probe is
never skipped silently.

Faults come from the TEST DOUBLE fake probe (tests/fakes/fake_probe.py): ``--hang-always``
answers the handshake, then never answers a ``run``. Where a whole ``aliasfuzz`` command is
needed, the fake stands in as the ``candle`` binary through ``ALIASFUZZ_PROBE_DIR`` (harness logic
under test, never a framework stand-in), as in tests/e2e/test_reliability.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from harness.targets.base import CANCELLED, HUNG_AFTER, SetupError
from harness.targets.runner import Runner
from tests.conftest import CASES, ROOT, run_cli
from tests.fakes.targets import fake_target
from tests.support.fake_targets import CLEAN, FILLS, statuses
from tests.support.fake_targets import probe_dir as _probe_dir


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


# -- (a) a probe that hangs on every program is given up on ------------------------------------


def test_a_probe_that_hangs_on_every_program_is_given_up_after_k_timeouts():
    t = fake_target("ref", "--hang-always", timeout_s=1.0)
    try:
        start = time.monotonic()
        traces = t.run_batch([CLEAN] * 10)
        took = time.monotonic() - start
        # Before: ten 1 s waits and ten restarts, and so on for every later batch, forever.
        assert statuses(traces) == ["timeout"] * 10
        assert took < 8, took  # K waits, one empty program's wait, not ten
        assert HUNG_AFTER == 2
        for tr in traces[HUNG_AFTER:]:
            assert "given up after 2 timeouts" in tr.message and "\n" not in tr.message
        assert t.process.given_up is not None and t.process.stats.timeouts == HUNG_AFTER
        assert any("given up after 2 timeouts" in line for line in t.process.stats.log)
        assert t.process.proc is None  # killed, not restarted
        starts = t.process.stats.starts
        start = time.monotonic()
        later = t.run_batch([CLEAN] * 5)  # later programs: a failed trace at once, no wait
        assert time.monotonic() - start < 0.5
        assert statuses(later) == ["timeout"] * 5 and "given up" in later[0].message
        assert t.process.stats.starts == starts
    finally:
        t.close()


def test_every_real_target_answers_the_liveness_check(all_targets):
    # The check's empty program must get a trace from every real probe and device (the PyTorch
    # worker, candle, burn): one that did not would be given up on after K programs that hang it.
    from harness.targets.base import _PING

    for t in all_targets.targets:
        p = t.process
        try:
            p._timeouts_in_a_row = HUNG_AFTER
            p._check_alive(t.info.device, None)
            assert p.given_up is None and p._timeouts_in_a_row == 0, (t.id, p.given_up)
            [trace] = t.run_wire([_PING])
            assert trace.status == "ok", (t.id, trace.message)
        finally:
            p.given_up, p._timeouts_in_a_row = None, 0


def test_programs_that_hang_a_live_probe_are_not_given_up():
    # ``--hang-on-fill`` hangs on ``fill`` only: the empty program after K such timeouts is
    # answered, so the probe stays in use and each hanging program keeps its own timeout trace.
    t = fake_target("ref", "--hang-on-fill", timeout_s=1.0)
    try:
        traces = t.run_batch([FILLS, FILLS, FILLS, CLEAN, FILLS, CLEAN])
        assert statuses(traces) == ["timeout", "timeout", "timeout", "ok", "timeout", "ok"]
        assert t.process.given_up is None
        assert "killed and restarted" in traces[2].message
    finally:
        t.close()


# -- (b) cancellation and deadlines --------------------------------------------------------------


def test_cancel_from_another_thread_stops_an_in_flight_batch_within_a_second():
    hung = fake_target("ref", "--hang-always", timeout_s=20.0)
    clean = fake_target("planted", timeout_s=20.0)
    runner = Runner([hung, clean])
    try:
        pid = hung.process.pid
        threading.Timer(1.0, runner.cancel).start()
        start = time.monotonic()
        results = runner.run([CLEAN] * 4)
        took = time.monotonic() - start
        assert took < 3, took  # before: a 20 s timeout per program, and restarts
        assert [r["fake:ref"].status for r in results] == [CANCELLED] * 4
        assert [r["fake:planted"].status for r in results] == ["ok"] * 4  # finished before the cancel
        assert "cancelled" in results[0]["fake:ref"].message
        assert gone(pid)  # the process it waited on is killed
        assert runner.cancelled
        starts = hung.process.stats.starts
        start = time.monotonic()
        again = runner.run([CLEAN])  # for good: later batches are cancelled at once
        assert time.monotonic() - start < 0.5
        assert {t.status for t in again[0].values()} == {CANCELLED}
        assert hung.process.stats.starts == starts and hung.process.stats.timeouts == 0
    finally:
        runner.close()


def test_a_deadline_cuts_a_batch_short_keeps_its_traces_and_can_be_lifted():
    slow = fake_target("ref", "--slow-ms", "400", timeout_s=20.0)
    runner = Runner([slow])
    try:
        runner.set_deadline(time.monotonic() + 1.0)
        start = time.monotonic()
        results = [r["fake:ref"] for r in runner.run([CLEAN] * 10)]
        assert time.monotonic() - start < 2.5
        got = statuses(results)
        assert got[0] == "ok" and got[-1] == CANCELLED  # the traces it had are kept, in order
        assert got == ["ok"] * got.count("ok") + [CANCELLED] * got.count(CANCELLED)
        assert runner.subset(["fake:ref"]).cancelled  # a subset shares the deadline
        runner.set_deadline(None)
        assert not runner.cancelled
        assert statuses([r["fake:ref"] for r in runner.run([CLEAN])]) == ["ok"]  # restarted
    finally:
        runner.close()


# -- (c) close and interpreter exit ---------------------------------------------------------------


def test_close_returns_within_seconds_while_a_batch_is_in_flight():
    hung = fake_target("ref", "--hang-always", timeout_s=20.0)
    runner = Runner([hung])
    wait = runner.submit([CLEAN] * 3)
    time.sleep(0.5)
    pid = hung.process.pid
    start = time.monotonic()
    runner.close()
    assert time.monotonic() - start < 3
    assert gone(pid)
    assert {r["fake:ref"].status for r in wait()} == {CANCELLED}
    assert {r["fake:ref"].status for r in runner.run([CLEAN])} == {CANCELLED}  # closed: nothing runs
    runner.close()  # twice is fine


def test_the_interpreter_exits_with_a_runner_left_unclosed_mid_batch(tmp_path: Path):
    # Nobody closes this runner (an exception skipped it): threading's at-exit join of the
    # runner's threads must not wait for the hung program (before: 20 s per program).
    script = tmp_path / "leave.py"
    script.write_text(
        textwrap.dedent("""
        import time
        from harness.targets.runner import Runner
        from tests.fakes.targets import fake_target
        from tests.support.fake_targets import CLEAN
        runner = Runner([fake_target("ref", "--hang-always", timeout_s=20.0)])
        runner.submit([CLEAN] * 3)
        time.sleep(0.5)
        print("leaving", flush=True)
    """)
    )
    start = time.monotonic()
    try:
        result = subprocess.run(
            [sys.executable, str(script)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the interpreter did not exit within 30 s: its at-exit join waited on a hung probe")
    assert result.returncode == 0, result.stderr
    assert "leaving" in result.stdout and time.monotonic() - start < 15


# -- (d) whole campaigns on a hung probe ---------------------------------------------------------


def _fuzz_hung(tmp_path: Path, interrupt_after: float | None, limit: float):
    """``aliasfuzz fuzz --budget 10s`` with the hung fake as candle: (seconds it took after the
    start or the SIGINT, return code, stdout, stderr). Fails when it runs past ``limit``."""
    probes = _probe_dir(tmp_path, "--hang-always")
    out = tmp_path / "run"
    # A fresh SIGINT disposition: under a shell's background job SIGINT is ignored, and a Python
    # that starts with it ignored never raises KeyboardInterrupt.
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "fuzz",
            "--budget",
            "10s",
            "--targets",
            "candle",
            "--max-programs",
            "100000",
            "--out",
            str(out),
            "--no-report",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "ALIASFUZZ_PROBE_DIR": str(probes)},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    start = time.monotonic()
    if interrupt_after is not None:
        time.sleep(interrupt_after)
        os.killpg(proc.pid, signal.SIGINT)  # as Ctrl-C: the terminal signals the foreground group
        start = time.monotonic()
    try:
        stdout, stderr = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the hung fakes exit once their harness is gone
        stdout, stderr = proc.communicate()
        pytest.fail(f"still running {limit:.0f} s later; output: {stdout[-1500:]} {stderr[-1500:]}")
    return time.monotonic() - start, proc.returncode, stdout, stderr


def test_campaign_on_a_hung_probe_ends_with_its_budget(tmp_path: Path):
    # Budget 10 s, plus the default shrink grace (10 s) and the drain (campaign.DRAIN_S, 10 s):
    # then the runner's deadline cuts the waits on the hung probe.
    took, code, stdout, stderr = _fuzz_hung(tmp_path, None, limit=40)
    assert "Traceback" not in stdout + stderr, stderr
    # The one target ran nothing: "0 new" would be agreement of failures, so it is exit 2.
    assert code == 2 and "nothing was compared" in stderr.strip().splitlines()[-1], stdout + stderr
    assert took < 40


def test_ctrl_c_on_a_campaign_on_a_hung_probe_exits_within_seconds(tmp_path: Path):
    took, code, stdout, stderr = _fuzz_hung(tmp_path, 5.0, limit=10)
    assert "Traceback" not in stdout + stderr, stderr
    assert code == 2, stdout + stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "interrupted" in lines[0], stderr
    assert took < 10


# -- 2. a missing probe is an error unless --targets narrows the set ------------------------------


def _empty(tmp_path: Path) -> Path:
    d = tmp_path / "empty"
    d.mkdir()
    return d


def test_default_targets_with_missing_probes_is_one_setup_error(tmp_path: Path, monkeypatch):
    from harness.targets.registry import open_runner

    probes = _empty(tmp_path)
    monkeypatch.setenv("ALIASFUZZ_PROBE_DIR", str(probes))
    with pytest.raises(SetupError) as info:
        open_runner(None)
    message = str(info.value)
    assert "\n" not in message
    assert "candle (" in message and "burn (" in message and "are not available" in message
    assert "No such file" in message  # why
    # the probes came from ALIASFUZZ_PROBE_DIR, not from a build: the fix is that folder, named once
    fix = f"the probes come prebuilt from ALIASFUZZ_PROBE_DIR={probes}: put working ones there"
    assert message.endswith(f"{fix}, or pass --targets torch to run without them"), message
    assert message.count(fix) == 1


def test_one_missing_probe_names_it_and_what_would_run(tmp_path: Path, monkeypatch):
    from harness.targets.registry import open_runner

    probes = _probe_dir(tmp_path)
    monkeypatch.setenv("ALIASFUZZ_PROBE_DIR", str(probes))  # candle: the fake; no burn
    with pytest.raises(SetupError) as info:
        open_runner(None)
    message = str(info.value)
    assert message.startswith("burn (cannot start ") and "candle" not in message.split("not available")[0]
    fix = f"the probes come prebuilt from ALIASFUZZ_PROBE_DIR={probes}: put working ones there"
    assert message.endswith(f"{fix}, or pass --targets torch,candle to run without it"), message


def test_an_explicit_target_list_narrows_silently(tmp_path: Path, monkeypatch):
    from harness.targets.registry import open_runner

    monkeypatch.setenv("ALIASFUZZ_PROBE_DIR", str(_empty(tmp_path)))
    runner, found = open_runner(["torch:cpu"])
    try:
        assert runner.ids == ["torch:cpu"] and found.unavailable == {}
    finally:
        runner.close()


def test_cli_fuzz_and_repro_without_targets_refuse_missing_probes(tmp_path: Path):
    env = {"ALIASFUZZ_PROBE_DIR": str(_empty(tmp_path))}
    # Before: fuzz ran torch alone and exited 0; repro of a case said "No divergence."
    for args in (
        ("fuzz", "--max-programs", "8", "--seed", "1", "--out", str(tmp_path / "run"), "--no-report"),
        ("repro", str(CASES / "example_sgd_snapshots.toml")),
    ):
        result = run_cli(*args, env=env, timeout=300)
        assert result.returncode == 2, result.stdout + result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
        assert "candle (" in lines[0] and "burn (" in lines[0] and "put working ones there" in lines[0]
        assert "--targets torch" in lines[0]
        assert "No divergence" not in result.stdout


def test_cli_targets_still_lists_what_is_unavailable(tmp_path: Path):
    result = run_cli("targets", "--json", env={"ALIASFUZZ_PROBE_DIR": str(_empty(tmp_path))}, timeout=300)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert set(doc["unavailable"]) == {"candle", "burn"}
    assert {t["framework"] for t in doc["targets"]} == {"torch"}
