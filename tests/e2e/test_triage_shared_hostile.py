"""A triage store in Redis next to a local one, and garbage in Redis (issue 40, faults 4 and 7),
with a real ``redis-server`` on a free port and the real command line. The findings come from
the TEST DOUBLE fake probe (see tests/e2e/test_campaign.py), which stands in for no framework."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import redis

from harness.triage import shared
from tests.conftest import CASES, run_cli
from tests.support.fake_targets import fake_probe_dir


def _campaign(tmp_path: Path, out: Path, seed: int, triage: str | None = None) -> Path:
    r = run_cli(
        "fuzz",
        "--targets",
        "candle",
        "--max-programs",
        "24",
        "--seed",
        str(seed),
        "--profile",
        "quick",
        "--shrink-time",
        "5",
        "--confirm",
        "1",
        "--no-report",
        "--out",
        str(out),
        *(["--triage", triage] if triage else []),
        env=fake_probe_dir(tmp_path),
    )
    assert r.returncode in (0, 1), r.stdout + r.stderr
    return out


def _runs(store: Path) -> set[str]:
    db = sqlite3.connect(f"{store.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return {r for (r,) in db.execute("SELECT run FROM runs")}
    finally:
        db.close()


@pytest.fixture(scope="module")
def local_history(tmp_path_factory):
    """A reports folder whose local store holds three runs, and a fourth run folder not recorded
    yet: ``(reports, store, unrecorded run)``."""
    tmp = tmp_path_factory.mktemp("local")
    reports = tmp / "reports"
    for seed in (1, 2, 3):
        _campaign(tmp, reports / f"run{seed}", seed)
    unrecorded = _campaign(tmp, reports / "run4", 4, triage=str(tmp / "not-this-one.sqlite"))
    (unrecorded / "triage.json").unlink()
    return reports, reports / "triage.sqlite", unrecorded


def test_recording_into_redis_leaves_the_local_store_as_it_was(tmp_path, local_history, redis_url):
    reports, store, run = local_history
    # Another machine's run is in Redis already.
    other = _campaign(tmp_path, tmp_path / "machine-b" / "reports" / "run-b", 7, triage=redis_url)
    before = store.read_bytes()
    assert len(_runs(store)) == 3
    r = run_cli("triage", "--record", str(run), "--store", redis_url)
    assert r.returncode == 0, r.stderr
    assert store.read_bytes() == before  # three runs of history, byte for byte
    copy = shared.fetch(redis_url, tmp_path / "copy.sqlite", "--store")
    assert _runs(copy) == {str(other.resolve()), str(run.resolve())}


def test_an_empty_key_starts_from_a_copy_of_the_local_store_which_stays_as_it_was(tmp_path, local_history, redis_url):
    reports, store, run = local_history
    before = store.read_bytes()
    r = run_cli("triage", "--record", str(run), "--store", redis_url)
    assert r.returncode == 0, r.stderr
    assert store.read_bytes() == before
    copy = shared.fetch(redis_url, tmp_path / "copy.sqlite", "--store")
    assert _runs(copy) == _runs(store) | {str(run.resolve())}


@pytest.mark.parametrize("garbage", [b"this is no database", b"", b"SQLite format 3\x00" + b"\x00" * 84])
def test_a_garbage_value_in_redis_is_one_line_and_nothing_local_changes(tmp_path, local_history, redis_url, garbage):
    reports, store, run = local_history
    (run / "triage.json").unlink(missing_ok=True)  # what a test before this one recorded
    redis.Redis.from_url(redis_url).set(shared.KEY, garbage)
    before = store.read_bytes()
    for args in (
        ["triage", "--record", str(run), "--store", redis_url],
        ["triage", "--store", redis_url],
        ["triage", "--store", redis_url, "--set", "x", "wontfix"],
    ):
        r = run_cli(*args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and shared.KEY in lines[0] and "not a triage store" in lines[0], r.stderr
    assert store.read_bytes() == before
    assert not (run / "triage.json").exists()
    assert redis.Redis.from_url(redis_url).get(shared.KEY) == garbage  # nor is the value replaced


def test_recheck_with_a_redis_store_records_there(tmp_path, redis_url):
    env = fake_probe_dir(tmp_path)
    baseline = tmp_path / "baseline.toml"
    baseline.write_text(
        '[[known]]\nid = "planted-clone"\nframeworks = ["candle"]\nmethod = "clone"\n'
        f'reason = "the planted bug"\ncase = "{CASES / "candle_clone_shares_storage.toml"}"\n'
    )
    r = run_cli("recheck", "--store", redis_url, "--targets", "candle", "--baseline", str(baseline), env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "still shows" in r.stdout and f"recorded in {redis_url}" in r.stdout, r.stdout
    copy = shared.fetch(redis_url, tmp_path / "copy.sqlite", "--store")
    rows = sqlite3.connect(copy).execute("SELECT cause, result FROM rechecks").fetchall()
    assert rows == [("planted-clone", "still shows")]
