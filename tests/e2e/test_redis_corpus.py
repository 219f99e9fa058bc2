"""Two campaigns sharing a Redis corpus (``--db redis://``): the second replays the first's
examples and the findings recur. Uses a real ``redis-server`` on a random free port, and the
TEST DOUBLE fake probe (see tests/e2e/test_campaign.py) for fast findings."""

from __future__ import annotations

import json

from tests.conftest import free_port, run_cli
from tests.support.fake_targets import fake_probe_dir


def test_second_campaign_replays_the_first(tmp_path, redis_url):
    env = fake_probe_dir(tmp_path)
    first, second = tmp_path / "first", tmp_path / "second"
    r = run_cli(
        "fuzz",
        "--targets",
        "candle",
        "--max-programs",
        "256",
        "--seed",
        "1",
        "--profile",
        "quick",
        "--shrink-time",
        "10",
        "--db",
        redis_url,
        "--out",
        str(first),
        "--no-report",
        env=env,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    found = {f["signature"] for f in json.loads((first / "findings.json").read_text())}
    assert found
    # Another machine of the same nightly: another seed, the same corpus, (almost) no budget of its own.
    r = run_cli(
        "fuzz",
        "--targets",
        "candle",
        "--max-programs",
        "1",
        "--seed",
        "2",
        "--profile",
        "quick",
        "--shrink-time",
        "10",
        "--db",
        redis_url,
        "--out",
        str(second),
        "--no-report",
        env=env,
    )
    assert r.returncode in (0, 1), r.stdout + r.stderr
    state = json.loads((second / "campaign.json").read_text())
    assert state["replayed"] > 0
    again = {f["signature"] for f in json.loads((second / "findings.json").read_text())}
    assert found <= again, found - again


def test_unreachable_redis_is_a_one_line_error(tmp_path):
    port = free_port()
    r = run_cli(
        "fuzz",
        "--targets",
        "candle",
        "--max-programs",
        "1",
        "--db",
        f"redis://127.0.0.1:{port}/0",
        "--out",
        str(tmp_path / "x"),
        env=fake_probe_dir(tmp_path),
    )
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
