"""The triage store kept in Redis (harness/triage/shared.py), with a real ``redis-server`` on a
free port: campaigns on two machines (two reports folders, no disk in common) record into one
store; ``aliasfuzz triage --store redis://`` lists and sets states in it; runs recorded at once
by several processes are all kept (Redis's optimistic lock). The findings come from the TEST
DOUBLE fake probe (see tests/e2e/test_campaign.py)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

from harness.triage import shared
from tests.conftest import PY, ROOT, free_port, run_cli
from tests.support.fake_targets import fake_probe_dir


def campaign(tmp_path: Path, machine: str, seed: int, triage: str, env) -> Path:
    out = tmp_path / machine / "reports" / f"run-{seed}"
    r = run_cli(
        "fuzz",
        "--targets",
        "candle",
        "--max-programs",
        "96",
        "--seed",
        str(seed),
        "--profile",
        "quick",
        "--shrink-time",
        "5",
        "--confirm",
        "1",
        "--triage",
        triage,
        "--out",
        str(out),
        env=env,
    )
    assert r.returncode in (0, 1), r.stdout + r.stderr
    assert "triage:" in r.stdout
    return out


def test_two_machines_keep_one_triage_history_in_redis(tmp_path, redis_url):
    env = fake_probe_dir(tmp_path)
    first = campaign(tmp_path, "machine-a", 1, redis_url, env)
    second = campaign(tmp_path, "machine-b", 2, redis_url, env)
    # The second machine's run follows the first's, though nothing of machine-a is on its disk.
    delta = json.loads((second / "triage.json").read_text())
    assert delta["previous_run"] == str(first.resolve())
    # The shared store holds both runs; no local store was made beside the run folder (one
    # there would only be read), and the run folder keeps what its report shows of the shared
    # history: when each of its causes was first seen.
    assert not (second.parent / "triage.sqlite").exists()
    copy = shared.fetch(redis_url, tmp_path / "copy.sqlite", "--store")
    runs = sqlite3.connect(copy).execute("SELECT run, started FROM runs ORDER BY started").fetchall()
    assert [r for (r, _) in runs] == [str(first.resolve()), str(second.resolve())]
    assert delta["first_seen_at"] and set(delta["first_seen_at"].values()) <= {started for (_, started) in runs}
    listed = run_cli("triage", "--store", redis_url)
    assert listed.returncode == 0 and "root causes" in listed.stdout, listed.stderr
    cause = listed.stdout.splitlines()[1].split()[-1]
    assert run_cli("triage", "--store", redis_url, "--set", cause, "wontfix").returncode == 0
    again = run_cli("triage", "--store", redis_url)
    assert any(line.startswith("wontfix") and line.endswith(cause) for line in again.stdout.splitlines()), again.stdout
    # A state set there holds on a machine's next run: a person's state is kept across runs.
    campaign(tmp_path, "machine-a", 3, redis_url, env)
    assert "wontfix" in run_cli("triage", "--store", redis_url).stdout


def test_runs_recorded_at_once_are_all_kept(tmp_path, redis_url):
    # Four run folders, recorded by four processes started together: each change is retried on
    # a fresh copy when another process wrote the store first, so none is lost.
    env = fake_probe_dir(tmp_path)
    folders = [campaign(tmp_path, f"m{i}", 10 + i, str(tmp_path / f"m{i}" / "local.sqlite"), env) for i in range(4)]
    procs = [
        subprocess.Popen(
            [PY, "-m", "harness.cli", "triage", "--record", str(f), "--store", redis_url],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for f in folders
    ]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    local = tmp_path / "copy.sqlite"
    shared.fetch(redis_url, local, "--store")
    runs = {r for (r,) in sqlite3.connect(local).execute("SELECT run FROM runs")}
    assert runs == {str(f.resolve()) for f in folders}


def test_an_unreachable_redis_store_is_one_line_and_the_run_is_kept(tmp_path):
    url = f"redis://127.0.0.1:{free_port()}/0"
    out = tmp_path / "reports" / "run"
    r = run_cli(
        "fuzz",
        "--targets",
        "candle",
        "--max-programs",
        "16",
        "--seed",
        "1",
        "--profile",
        "quick",
        "--triage",
        url,
        "--out",
        str(out),
        "--no-report",
        env=fake_probe_dir(tmp_path),
    )
    assert r.returncode in (0, 1), r.stderr
    assert "the run is not in the triage store" in r.stderr and "--triage redis://127.0.0.1" in r.stderr
    assert len([text for text in r.stderr.splitlines() if "triage" in text]) == 1
    assert (out / "findings.json").exists()
    for args in (["triage", "--store", url], ["triage", "--store", url, "--set", "x", "wontfix"]):
        bad = run_cli(*args)
        assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "--store" in bad.stderr, bad.stderr
