"""A probe that never answers its handshake: a campaign's start-up is bounded by its time (the
budget, the shrink grace and the drain ``DRAIN_S`` that cut off every other wait of the targets).

The TEST DOUBLE fake probe stands in as the ``candle`` binary (``ALIASFUZZ_PROBE_DIR``) with
``--hang-at-hello``: it reads the handshake request and never answers (it exits once the harness
that started it is gone). Before, ``fuzz --budget 5s`` waited the two minutes a slow probe is
given to start.
"""

from __future__ import annotations

import time

from harness.fuzzing.campaign import DRAIN_S, usable_cpus
from tests.conftest import run_cli
from tests.support.fake_targets import fake_probe_dir
from tests.support.run_folders import one_line_error


def test_fuzz_gives_up_on_a_silent_probe_when_the_budget_ends(tmp_path):
    out = tmp_path / "run"
    started = time.monotonic()
    r = run_cli(
        "fuzz",
        "--targets",
        "candle",
        "--budget",
        "3s",
        "--shrink-grace",
        "0",
        "--no-report",
        "--out",
        str(out),
        env=fake_probe_dir(tmp_path, "--hang-at-hello"),
        timeout=60,
    )
    took = time.monotonic() - started
    line = one_line_error(r, "candle: no handshake within", "when the campaign's time was up")
    assert "make probes" not in line  # the probe is there: it is no missing build
    assert took < 3 + DRAIN_S + 10, f"start-up took {took:.0f}s with a budget of 3s and no shrink grace"
    assert not out.exists()  # a set-up that fails leaves nothing behind


def test_fuzz_with_workers_gives_up_on_a_silent_probe_when_the_budget_ends(tmp_path):
    """Each worker process opens its own targets: the same bound holds there."""
    started = time.monotonic()
    workers = str(min(2, usable_cpus()))  # more than the CPUs is refused before any start-up
    r = run_cli(
        "fuzz",
        "--targets",
        "candle",
        "--budget",
        "3s",
        "--shrink-grace",
        "0",
        "--workers",
        workers,
        "--no-report",
        "--out",
        str(tmp_path / "run"),
        env=fake_probe_dir(tmp_path, "--hang-at-hello"),
        timeout=60,
    )
    took = time.monotonic() - started
    assert took < 3 + DRAIN_S + 20, f"start-up took {took:.0f}s with a budget of 3s and no shrink grace"
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    assert "no handshake within" in r.stderr and "Traceback" not in r.stderr
