"""Reliability: every fault is injected into a real run, which must finish, record the fault as a
finding or a clear log line, and lose nothing it had already found.

Faults come from the TEST DOUBLE fake probe's switches (tests/fakes/fake_probe.py), from the real
PyTorch worker's fault hook (``ALIASFUZZ_TORCH_FAULT``), from outside (SIGKILL), from the file
system (a tiny tmpfs that fills up), and from malformed case files. Where a campaign is needed,
the fake probe stands in as the ``candle`` binary through ``ALIASFUZZ_PROBE_DIR`` (harness logic
under test, never a framework stand-in).

The tests of this subject that run in-process are in tests/unit/fuzzing/test_reliability.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from harness.case.ir import Program
from harness.fuzzing.baseline import Baseline
from harness.fuzzing.campaign import CampaignError, RunFolder
from harness.fuzzing.engine import Engine
from harness.targets.base import ProbeProcess, SetupError
from harness.targets.registry import discover
from harness.targets.runner import Runner
from harness.targets.trace import alike
from tests.conftest import CASES, run_cli
from tests.fakes.targets import FAKE, fake_target
from tests.support.fake_targets import CLEAN, FILLS, W, probe_dir, program, statuses

SCALES = program([W], [{"op": "scale", "target": "w", "factor": 2.0}])
FAULT = Program((W,), ({"op": "_fault"},))  # the torch worker's fault hook (not a case-format op)
# The same with a step after the fault, so that a torch variant (which is only sent programs with
# a step) runs it too and can be the clean side of a comparison.
FAULT_THEN_STEP = Program(
    (W,),
    (
        {"op": "_fault"},
        {
            "op": "step",
            "optimizer": "sgd",
            "lr": 0.5,
            "momentum": 0.0,
            "dampening": 0.0,
            "betas": [0.9, 0.999],
            "eps": 1e-8,
            "weight_decay": 0.0,
        },
    ),
)


def same_trace(a, b) -> bool:
    """Equal as the oracle sees them (identity tokens renamed, timings left out)."""
    return alike(a, b)


@pytest.fixture(scope="module")
def reference():
    t = fake_target("ref")
    yield {p.key(): t.run(p) for p in (CLEAN, SCALES, FILLS)}
    t.close()


# -- probe faults, one process ------------------------------------------------------------------


def test_probe_sigkilled_mid_program_is_a_crash_and_the_batch_goes_on(reference):
    t = fake_target("ref", "--die-on-scale")
    try:
        first_pid = t.process.pid
        traces = t.run_batch([CLEAN, SCALES, CLEAN])
        assert statuses(traces) == ["ok", "crash", "ok"]
        assert "killed by SIGKILL" in traces[1].message
        assert same_trace(traces[0], reference[CLEAN.key()]) and same_trace(traces[2], reference[CLEAN.key()])
        assert t.process.stats.crashes == 1 and t.process.stats.starts == 2 and t.process.pid != first_pid
        assert any("died running this program" in line for line in t.process.stats.log)
    finally:
        t.close()


def test_probe_hang_times_out_is_killed_and_restarted(reference):
    t = fake_target("ref", "--hang-on-fill", timeout_s=1.0)
    try:
        hung_pid = t.process.pid
        start = time.monotonic()
        traces = t.run_batch([CLEAN, FILLS, CLEAN])
        assert time.monotonic() - start < 20
        assert statuses(traces) == ["ok", "timeout", "ok"]
        assert same_trace(traces[2], reference[CLEAN.key()])
        assert t.process.stats.timeouts == 1 and t.process.pid != hung_pid
        with pytest.raises(ProcessLookupError):
            os.kill(hung_pid, 0)  # the hung process is gone, not leaked
        assert any("killed and restarted" in line for line in t.process.stats.log)
    finally:
        t.close()


def test_garbage_on_stdout_is_ignored_and_logged(reference):
    t = fake_target("ref", "--garbage")
    try:
        traces = t.run_batch([CLEAN, SCALES, FILLS])
        assert statuses(traces) == ["ok"] * 3
        for p, tr in zip([CLEAN, SCALES, FILLS], traces):
            assert same_trace(tr, reference[p.key()])
        assert t.process.stats.garbage_lines >= 3
        assert any("ignored stray output" in line for line in t.process.stats.log)
    finally:
        t.close()


def test_a_malformed_trace_is_an_error_trace_and_the_probe_goes_on(reference):
    # Valid JSON, the right type and id, but a value holding null and a shape that is no list:
    # reading it used to raise in the runner's thread and end the whole campaign.
    t = fake_target("ref", "--bad-trace")
    try:
        pid = t.process.pid
        traces = t.run_batch([CLEAN, FILLS, SCALES])
        assert statuses(traces) == ["ok", "error", "ok"]
        assert traces[1].message.startswith("fake:ref: malformed trace: ") and "\n" not in traces[1].message
        for p, tr in ((CLEAN, traces[0]), (SCALES, traces[2])):
            assert same_trace(tr, reference[p.key()])
        assert t.process.pid == pid and t.process.stats.malformed_traces == 1  # not restarted
        assert any("malformed trace" in line for line in t.process.stats.log)
    finally:
        t.close()


def test_probe_exiting_at_start_up_is_one_line_and_never_hangs():
    proc = ProbeProcess("fake:ref", [sys.executable, str(FAKE), "--exit-at-start"], start_timeout_s=10)
    with pytest.raises(SetupError) as info:
        proc.start()
    assert "exited during start-up (exit status 3)" in str(info.value) and "\n" not in str(info.value)
    traces = proc.run_batch("ref", [CLEAN.to_wire(), CLEAN.to_wire()], "fake:ref")
    assert statuses(traces) == ["crash", "crash"] and "exited during start-up" in traces[0].message


def test_missing_binary_is_one_line_pointing_at_make_probes(tmp_path: Path):
    proc = ProbeProcess("candle", [str(tmp_path / "candle_probe")])
    with pytest.raises(SetupError) as info:
        proc.start()
    assert "make probes" in str(info.value) and "\n" not in str(info.value)


def test_missing_prebuilt_binary_names_its_folder_not_make_probes(tmp_path: Path):
    # A device package's probes come from ALIASFUZZ_PROBE_DIR on a machine that may have no Rust.
    proc = ProbeProcess("candle", [str(tmp_path / "candle_probe")], env={"ALIASFUZZ_PROBE_DIR": str(tmp_path)})
    with pytest.raises(SetupError) as info:
        proc.start()
    message = str(info.value)
    assert f"ALIASFUZZ_PROBE_DIR={tmp_path}" in message and "make probes" not in message and "\n" not in message


def test_prebuilt_probe_exiting_at_start_up_names_its_folder_once(tmp_path: Path, monkeypatch):
    probe = tmp_path / "candle_probe"
    probe.write_text("#!/bin/sh\nexit 127\n")  # a shell's answer for a missing shared library
    probe.chmod(0o755)
    monkeypatch.setenv("ALIASFUZZ_PROBE_DIR", str(tmp_path))
    with pytest.raises(SetupError) as info:
        discover(["candle"], timeout_s=10)
    why = str(info.value)
    assert "exited during start-up (exit status 127)" in why and "make probes" not in why
    assert why.count(f"ALIASFUZZ_PROBE_DIR={tmp_path}") == 1 and "\n" not in why


def test_a_device_that_names_a_longer_program_timeout_is_waited_for(tmp_path: Path, monkeypatch):
    # Both devices answer after 1.5 s; the harness waits 1 s, and "planted" says one program may
    # take 5 (PROTOCOL.md, program_timeout_s: torch:cpu+inductor's first compile).
    monkeypatch.setenv("ALIASFUZZ_PROBE_DIR", str(probe_dir(tmp_path, "--slow-ms 1500 --planted-program-timeout-s 5")))
    with discover(["candle"], timeout_s=1.0) as found:
        targets = {t.info.device: t for t in found.targets}
        assert (targets["ref"].process.timeout_s, targets["planted"].process.timeout_s) == (1.0, 5.0)
        assert statuses(targets["planted"].run_batch([CLEAN])) == ["ok"]
        assert statuses(targets["ref"].run_batch([CLEAN])) == ["timeout"]


def test_a_program_timeout_that_is_no_positive_number_is_a_malformed_handshake(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("ALIASFUZZ_PROBE_DIR", str(probe_dir(tmp_path, "--planted-program-timeout-s -1")))
    with pytest.raises(SetupError) as info:
        discover(["candle"], timeout_s=10)
    assert "`program_timeout_s` of device 'planted' is not a positive number" in str(info.value)


def test_stale_probe_protocol_is_one_line_asking_for_a_rebuild():
    proc = ProbeProcess("fake:ref", [sys.executable, str(FAKE), "--protocol", "1"], start_timeout_s=10)
    with pytest.raises(SetupError) as info:
        proc.start()
    message = str(info.value)
    assert "protocol 1" in message and "stale" in message and "make probes" in message and "\n" not in message
    assert proc.proc is None  # stopped, not leaked


def test_malformed_handshake_is_one_line_asking_for_a_rebuild():
    # The right protocol number, but ``devices`` is a string: discovery used to raise a TypeError.
    proc = ProbeProcess("fake:ref", [sys.executable, str(FAKE), "--bad-hello"], start_timeout_s=10)
    with pytest.raises(SetupError) as info:
        proc.start()
    message = str(info.value)
    assert "malformed handshake" in message and "`devices`" in message and "make probes" in message
    assert "\n" not in message and proc.proc is None


@pytest.mark.parametrize("fault", ["missing", "stale", "bad-hello", "exit-at-start"])
def test_cli_reports_an_unusable_probe_in_one_line(tmp_path: Path, fault: str):
    if fault == "missing":
        probes = tmp_path / "empty"
        probes.mkdir()
    else:
        probes = probe_dir(
            tmp_path, {"stale": "--protocol 1", "bad-hello": "--bad-hello", "exit-at-start": "--exit-at-start"}[fault]
        )
    result = run_cli(
        "repro",
        str(CASES / "example_sgd_snapshots.toml"),
        "--targets",
        "candle",
        env={"ALIASFUZZ_PROBE_DIR": str(probes)},
        timeout=120,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "candle" in lines[0]
    # The probes came from ALIASFUZZ_PROBE_DIR, not from a build: the fix is that folder's binary.
    assert f"ALIASFUZZ_PROBE_DIR={probes}" in lines[0] and "make probes" not in lines[0]
    if fault == "stale":
        assert "stale" in lines[0]
    if fault == "bad-hello":
        assert "malformed handshake" in lines[0]


# -- the PyTorch worker -------------------------------------------------------------------------


def _torch(target: str, fault: str | None, timeout_s: float = 60.0):
    from harness.targets.registry import discover

    found = discover(
        [target], env={"ALIASFUZZ_TORCH_FAULT": fault} if fault else {"ALIASFUZZ_TORCH_FAULT": ""}, timeout_s=timeout_s
    )
    assert [t.id for t in found.targets] == [target]
    return found.targets[0]


def test_torch_target_segfault_is_a_crash_finding_and_nothing_is_lost():
    faulty, clean = _torch("torch:cpu", "segfault"), _torch("torch:cpu+foreach", None)
    runner = Runner([faulty, clean])
    try:
        first_pid = faulty.process.pid
        traces = runner.run([CLEAN, FAULT_THEN_STEP, CLEAN])
        assert [t["torch:cpu"].status for t in traces] == ["ok", "crash", "ok"]
        assert "killed by SIGSEGV" in traces[1]["torch:cpu"].message
        assert faulty.process.pid != first_pid
        assert same_trace(traces[0]["torch:cpu"], traces[2]["torch:cpu"])
        # Through the engine and the oracle: the crash is a finding of its program, only. (Not
        # shrunk here: ``_fault`` is a worker hook, not a case-format op the minimizer accepts.)
        engine = Engine(runner, Baseline([]))
        findings = [[(f.kind, f.targets) for f in fs] for _, _, fs in engine.check([CLEAN, FAULT_THEN_STEP, CLEAN])]
        assert findings == [[], [("crash", ("torch:cpu", "-"))], []]
        assert statuses(faulty.run_batch([CLEAN])) == ["ok"]
    finally:
        runner.close()


def test_torch_target_killed_from_outside_mid_program_and_hanging():
    t = _torch("torch:cpu", "hang", timeout_s=60)
    try:
        victim = t.process.pid
        threading.Timer(2.0, os.kill, (victim, signal.SIGKILL)).start()
        traces = t.run_batch([CLEAN, FAULT, CLEAN])  # FAULT hangs; SIGKILL lands while it runs
        assert statuses(traces) == ["ok", "crash", "ok"]
        assert "killed by SIGKILL" in traces[1].message
        # A hang with nobody to kill it: the per-program timeout does.
        t.process.timeout_s = 2.0
        hung = t.process.pid
        traces = t.run_batch([FAULT, CLEAN])
        assert statuses(traces) == ["timeout", "ok"]
        assert t.process.stats.timeouts == 1
        with pytest.raises(ProcessLookupError):
            os.kill(hung, 0)
    finally:
        t.close()


# -- whole campaigns ----------------------------------------------------------------------------


def _fuzz(tmp_path: Path, out: Path, *flags: str, budget=("--max-programs", "64")):
    probes = probe_dir(tmp_path, *flags)
    return run_cli(
        "fuzz",
        *budget,
        "--seed",
        "7",
        "--profile",
        "quick",
        "--targets",
        "candle",
        "--shrink-time",
        "5",
        "--chunk-size",
        "32",
        "--out",
        str(out),
        "--no-report",
        env={"ALIASFUZZ_PROBE_DIR": str(probes)},
        timeout=600,
    )


def _journal(out: Path) -> list[dict]:
    lines = (out / "findings.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]  # every line parses: nothing torn
    for r in records:
        assert (out / r["case"]).exists() and (out / r["original_case"]).exists()
    return records


@pytest.mark.parametrize("fault", ["--die-on-scale", "--garbage", "--bad-trace"])
def test_campaign_survives_probe_faults_and_keeps_its_findings(tmp_path: Path, fault: str):
    out = tmp_path / "run"
    result = _fuzz(tmp_path, out, fault)
    assert result.returncode in (0, 1), result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    records = _journal(out)
    # The fake's planted bug (its ``planted`` clone shares storage) is found despite the fault.
    assert any(r["kind"] == "device" and "clone" in r["signature"] for r in records), [r["signature"] for r in records]
    state = json.loads((out / "campaign.json").read_text())
    assert state["programs"] >= 64
    log_line = {
        "--die-on-scale": "died running this program",
        "--garbage": "ignored stray output",
        "--bad-trace": "malformed trace",
    }[fault]
    assert log_line in result.stdout, result.stdout[-2000:]


def _tmpfs(path: Path, size: str):
    path.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, text=True
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip()}): needs root")


@pytest.fixture
def tiny_disk(tmp_path: Path):
    mnt = tmp_path / "tiny"
    _tmpfs(mnt, "64k")
    yield mnt
    subprocess.run(["umount", str(mnt)], check=False)


def _fill(mnt: Path, leave: int) -> Path:
    """Fills the file system up to ``leave`` bytes free."""
    filler = mnt / "filler"
    st = os.statvfs(mnt)
    free = st.f_bavail * st.f_frsize
    with open(filler, "wb") as f:
        f.write(b"\0" * max(0, free - leave))
    return filler


def test_disk_full_while_writing_findings_loses_nothing(tiny_disk: Path):
    folder = RunFolder(tiny_disk / "run")
    folder.create()
    filler = _fill(tiny_disk, 40 * 1024)
    records: list[dict] = []
    repro = {"traces": "x" * 3000}
    written = 0
    with pytest.raises(CampaignError) as info:
        for i in range(100):
            folder.add_finding(
                {"signature": f"sig{i}", "kind": "device"}, f"# case {i}\n", f"# original {i}\n", repro, records
            )
            written += 1
    message = str(info.value)
    assert "cannot write a finding" in message and "intact" in message and "\n" not in message
    assert written >= 1
    assert [r["signature"] for r in folder.load_findings()] == [f"sig{i}" for i in range(written)]
    assert [r["signature"] for r in _journal(folder.path)] == [f"sig{i}" for i in range(written)]
    assert len(json.loads(folder.findings_json.read_text())) in (written, written - 1)  # rewritten after the journal
    # Space comes back: the campaign resumes where it was and the journal stays readable.
    filler.unlink()
    folder.add_finding({"signature": "after", "kind": "device"}, "#\n", "#\n", None, records)
    assert [r["signature"] for r in folder.load_findings()][-1] == "after"
    assert len(folder.load_findings()) == written + 1


def test_campaign_on_a_full_disk_stops_with_one_line(tmp_path: Path):
    mnt = tmp_path / "tiny"
    _tmpfs(mnt, "64k")
    try:
        _fill(mnt, 12 * 1024)
        out = mnt / "run"
        result = _fuzz(tmp_path, out)
        assert result.returncode == 2, result.stdout + result.stderr
        lines = [line for line in result.stderr.strip().splitlines() if line.startswith("aliasfuzz:")]
        assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
        assert "cannot write" in lines[0]
        if (out / "findings.jsonl").exists():
            _journal(out)  # whatever was reported is whole
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
