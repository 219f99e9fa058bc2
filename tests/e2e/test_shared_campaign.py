"""One campaign over many machines (``fuzz --campaign NAME --db redis://``): three ``aliasfuzz
fuzz`` processes, each with its own run folder and probes, stand in for three machines on one
real ``redis-server``; one is killed with SIGKILL while it holds a chunk. What Redis holds
afterwards is the evidence: every chunk done once, the dead machine's chunk re-issued, every
finding shrunk once. The target is the TEST DOUBLE fake probe (tests/e2e/test_campaign.py
``fake_probe_dir``), which stands in for no framework.

The tests of this subject that run in-process are in tests/unit/fuzzing/test_shared_campaign.py.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import PY, ROOT, run_cli
from tests.support.fake_targets import fake_probe_dir

CHUNK, CHUNKS = 8, 24
NAME = "nightly"


def wait_for(condition, timeout: float, what: str):
    """Polls ``condition`` until it returns something true; fails naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"{what}: not within {timeout:g}s")


def start_machine(url: str, out: Path, env: dict[str, str], *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            PY,
            "-m",
            "harness.cli",
            "fuzz",
            "--db",
            url,
            "--campaign",
            NAME,
            "--targets",
            "candle",
            "--profile",
            "quick",
            "--seed",
            "11",
            "--max-programs",
            str(CHUNK * CHUNKS),
            "--chunk-size",
            str(CHUNK),
            "--shrink-time",
            "10",
            "--confirm",
            "0",
            "--lease",
            "4",
            "--out",
            str(out),
            "--no-report",
            *extra,
        ],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def leases_of(client, owner_prefix: str) -> set[int]:
    prefix = f"aliasfuzz:campaign:{NAME}:lease:"
    held = set()
    for key in client.scan_iter(prefix + "*"):
        value = client.get(key)
        if value is not None and value.decode().startswith(owner_prefix):
            held.add(int(key.decode()[len(prefix) :]))
    return held


@pytest.fixture(scope="module")
def killed_campaign(module_redis_server, tmp_path_factory):
    """Three machines on one campaign (the third with two workers); the first is killed (SIGKILL,
    probes too) while it holds a chunk and after the campaign has done one. Returns (url,
    snapshot, victim's owner prefix, the chunks it held when it died, the survivors' run folders,
    tmp)."""
    import redis

    from harness.fuzzing.shared_report import snapshot

    url = module_redis_server[0]
    client = redis.Redis.from_url(url)
    tmp = tmp_path_factory.mktemp("machines")
    env = fake_probe_dir(tmp, "--slow-ms", "20")
    outs = [tmp / f"machine{i}" for i in range(3)]
    # The third machine runs two worker processes: each claims chunks and signatures on its own.
    procs = [start_machine(url, out, env, *(["--workers", "2"] if i == 2 else [])) for i, out in enumerate(outs)]
    try:
        victim = f"{socket.gethostname()}:{procs[0].pid}:"
        wait_for(
            lambda: snapshot(client, NAME).done and leases_of(client, victim) or procs[0].poll() is not None,
            120,
            "machine 0 holding a chunk once the campaign is under way",
        )
        assert procs[0].poll() is None, "machine 0 ended before it could be killed"
        os.killpg(procs[0].pid, signal.SIGKILL)
        procs[0].wait(timeout=30)
        held = leases_of(client, victim)  # nothing renews them now; they expire after --lease
        assert held, "machine 0 held no chunk when it died"
        for p in procs[1:]:
            stdout, stderr = p.communicate(timeout=300)
            assert p.returncode in (0, 1), stdout + stderr
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=30)
    return url, snapshot(client, NAME), victim, held, outs[1:], tmp


def test_a_killed_machines_chunk_is_reissued_and_no_chunk_is_lost_or_done_twice(killed_campaign):
    _url, snap, _victim, held, _outs, _tmp = killed_campaign
    assert snap.done == set(range(CHUNKS)) and not snap.pending
    # Every chunk was run to completion once: the dead machine's by another machine.
    assert snap.completed_again == {}
    assert all(snap.reissued.get(c, 0) >= 1 for c in held), (held, snap.reissued)
    assert snap.programs == CHUNK * CHUNKS
    assert sum(snap.machine_programs.values()) == snap.programs


def test_each_finding_is_shrunk_once_by_the_machine_that_claimed_it(killed_campaign):
    _url, snap, victim, _held, outs, _tmp = killed_campaign
    assert snap.order and len(snap.order) == len(set(snap.order)) == len(snap.findings)
    for sig in snap.order:
        shrinkers = [owner for owner, s in snap.shrinks if s == sig]
        stored_by = snap.findings[sig]["machine"]
        assert shrinkers[-1] == stored_by, (sig, shrinkers)
        # Shrunk twice only if the first shrinker was the dead machine, which never stored it.
        assert shrinkers == [stored_by] or (len(shrinkers) == 2 and shrinkers[0].startswith(victim)), shrinkers
    # The other machines met the same signatures and recorded sightings, not findings of their own:
    # a signature is in one machine's run folder at most.
    assert sum(snap.sightings.values()) > 0
    local = [json.loads((o / "findings.json").read_text()) for o in outs]
    signatures = [f["signature"] for records in local for f in records]
    assert len(signatures) == len(set(signatures)) and set(signatures) <= set(snap.order)


def test_report_renders_the_merged_campaign(killed_campaign):
    url, snap, _victim, _held, _outs, tmp = killed_campaign
    out = tmp / "merged"
    r = run_cli("report", f"{url}/{NAME}", "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    assert (out / "report.md").exists() and (out / "report.html").exists()
    records = json.loads((out / "findings.json").read_text())
    assert [f["signature"] for f in records] == snap.order
    for f in records:
        assert (out / f["case"]).exists() and (out / f["original_case"]).exists()
    state = json.loads((out / "campaign.json").read_text())
    assert state["programs"] == CHUNK * CHUNKS and state["config"]["campaign"] == NAME
    assert f"| programs run | {CHUNK * CHUNKS} |" in (out / "report.md").read_text()
    # A second render into the same folder is refused (it holds a campaign): one line.
    r = run_cli("report", f"{url}/{NAME}", "--out", str(out))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_a_conflicting_config_is_refused_and_a_bare_join_adopts_it(tmp_path, redis_url):
    env = fake_probe_dir(tmp_path)
    common = ["fuzz", "--db", redis_url, "--campaign", "small", "--no-report"]
    r = run_cli(
        *common,
        "--targets",
        "candle:ref",
        "--seed",
        "1",
        "--max-programs",
        "16",
        "--chunk-size",
        "8",
        "--out",
        str(tmp_path / "a"),
        env=env,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    for flag, value in (("--seed", "2"), ("--chunk-size", "4"), ("--targets", "candle"), ("--budget", "1m")):
        r = run_cli(*common, flag, value, "--out", str(tmp_path / "b"), env=env)
        assert r.returncode == 2, (flag, r.stdout, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"aliasfuzz: {flag} ") and "campaign small" in lines[0], lines
        assert r.stdout == "", r.stdout
        assert not (tmp_path / "b").exists()
    # A machine that names only the campaign runs it as stored; all of it is done, so it runs nothing.
    r = run_cli("fuzz", "--db", redis_url, "--campaign", "small", "--out", str(tmp_path / "c"), "--no-report", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    config = json.loads((tmp_path / "c" / "campaign.json").read_text())["config"]
    assert (config["seed"], config["chunk_size"], config["targets"]) == (1, 8, ["candle:ref"])
    # --resume with the campaign's URL: the same, from any machine.
    r = run_cli("fuzz", "--resume", f"{redis_url}/small", "--out", str(tmp_path / "e"), "--no-report", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads((tmp_path / "e" / "campaign.json").read_text())["config"]["campaign"] == "small"
    # --campaign needs a Redis --db.
    r = run_cli("fuzz", "--campaign", "small", "--max-programs", "8", "--out", str(tmp_path / "d"), env=env)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "--db redis://" in r.stderr, r.stderr


def test_a_killed_machine_resumes_its_campaign(tmp_path, redis_url):
    import redis

    from harness.fuzzing.shared_report import snapshot

    client = redis.Redis.from_url(redis_url)
    out = tmp_path / "machine"
    env = fake_probe_dir(tmp_path, "--slow-ms", "20")
    proc = start_machine(redis_url, out, env)
    try:
        owner = f"{socket.gethostname()}:{proc.pid}:"
        wait_for(
            lambda: snapshot(client, NAME).done and leases_of(client, owner) or proc.poll() is not None,
            120,
            "the machine holding a chunk once the campaign is under way",
        )
        assert proc.poll() is None, "the machine ended before it could be killed"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    held = leases_of(client, owner)
    assert held and len(snapshot(client, NAME).done) < CHUNKS
    # The same machine (its folder names the campaign) goes on: the chunks it held come back to it
    # once their leases expire.
    r = run_cli("fuzz", "--resume", str(out), "--no-report", env=env)
    assert r.returncode in (0, 1), r.stdout + r.stderr
    snap = snapshot(client, NAME)
    assert snap.done == set(range(CHUNKS)) and snap.completed_again == {}
    assert all(snap.reissued.get(c, 0) >= 1 for c in held), (held, snap.reissued)
    state = json.loads((out / "campaign.json").read_text())
    assert state["runs"][-1]["resumed"] is True and state["config"]["campaign"] == NAME


def test_redis_lost_mid_campaign_is_one_line_and_the_folder_keeps_its_state(tmp_path, redis_server):
    import redis

    from harness.fuzzing.shared_report import snapshot

    url, server = redis_server
    client = redis.Redis.from_url(url)
    out = tmp_path / "machine"
    proc = start_machine(url, out, fake_probe_dir(tmp_path, "--slow-ms", "20"))
    try:
        wait_for(lambda: snapshot(client, NAME).done or proc.poll() is not None, 120, "a chunk done")
        server.kill()
        server.wait(timeout=30)
        _stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    assert proc.returncode == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Redis failed" in lines[0] and f"campaign {NAME}" in lines[0], lines
    state = json.loads((out / "campaign.json").read_text())
    assert state["programs"] > 0 and state["config"]["campaign"] == NAME
