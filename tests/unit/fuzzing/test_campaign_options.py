"""Campaign options a careless or hostile user gives, and campaigns that run no program, through
the real command line with the TEST DOUBLE fake probe standing in as the ``candle`` binary.

- A chunk size is bounded (``options.MAX_CHUNK_SIZE``, checked by ``options.option_problem`` for the
  command line, bench, a resumed campaign.json and a shared campaign's Redis configuration alike): a chunk is drawn whole before it runs, so a
  billion-program chunk never ended and grew without bound, whatever the budget.
- A campaign that ran no program never reports "0 new" with exit 0: it is exit 2 with one line
  "ran no program" (a budget of no time without a corpus to replay, targets too slow for one
  program within the budget), and more workers than the machine can start are refused.
- ``--confirm -1`` is refused like every other option out of range.

The tests here run in this process (the command line through ``run_cli_in_process``), as the
unit tier requires; those that need real processes are in tests/e2e/test_campaign_options.py.
"""

from __future__ import annotations

import json
import time

import pytest

from harness.fuzzing.campaign import usable_cpus
from harness.fuzzing.options import MAX_CHUNK_SIZE, option_problem
from tests.conftest import run_cli_in_process
from tests.support.campaign_options import FUZZ
from tests.support.fake_targets import fake_probe_dir
from tests.support.run_folders import one_line_error, unstarted_run_folder


def fuzz(tmp_path, *args: str, timeout: float = 120):
    return run_cli_in_process(
        *FUZZ, "--out", str(tmp_path / "run"), *args, env=fake_probe_dir(tmp_path), timeout=timeout
    )


# -- the chunk size --------------------------------------------------------------------------------


@pytest.mark.parametrize("size", ["1000000000", str(MAX_CHUNK_SIZE + 1), "0", "-64"])
def test_a_chunk_size_out_of_range_is_refused_before_anything_runs(tmp_path, size):
    started = time.monotonic()
    r = fuzz(tmp_path, "--chunk-size", size, "--budget", "10s", timeout=60)
    one_line_error(r, f"--chunk-size {size}: must be an integer from 1 to {MAX_CHUNK_SIZE}")
    assert time.monotonic() - started < 30
    assert not (tmp_path / "run").exists()


def test_bench_refuses_a_chunk_size_over_the_maximum(tmp_path):
    r = run_cli_in_process(
        "bench",
        "--targets",
        "candle",
        "--chunk-size",
        "1000000000",
        "--rss-programs",
        "0",
        env=fake_probe_dir(tmp_path),
        timeout=60,
    )
    one_line_error(r, f"--chunk-size 1000000000: {option_problem('chunk_size', 1_000_000_000)}")
    assert r.stdout == ""


def test_a_saved_chunk_size_out_of_range_is_refused_on_resume(tmp_path):
    out = unstarted_run_folder(tmp_path)
    doc = json.loads((out / "campaign.json").read_text())
    doc["config"]["chunk_size"] = 1_000_000_000
    (out / "campaign.json").write_text(json.dumps(doc))
    before = (out / "campaign.json").read_bytes()
    r = run_cli_in_process(
        "fuzz", "--resume", str(out), "--budget", "10s", "--no-report", env=fake_probe_dir(tmp_path), timeout=60
    )
    one_line_error(r, f"campaign.json: config.chunk_size 1000000000: {option_problem('chunk_size', 1_000_000_000)}")
    assert (out / "campaign.json").read_bytes() == before


def test_more_workers_than_the_machine_can_start_are_refused(tmp_path):
    too_many = usable_cpus() + 1
    r = fuzz(tmp_path, "--workers", str(too_many), "--budget", "5s", "--max-programs", "8")
    one_line_error(r, f"--workers {too_many}: more than the {usable_cpus()} CPU(s)")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("value", ["-1", "-100"])
def test_a_negative_confirm_is_refused(tmp_path, value):
    r = run_cli_in_process(
        "fuzz",
        "--targets",
        "candle",
        "--max-programs",
        "8",
        "--confirm",
        value,
        "--no-report",
        "--out",
        str(tmp_path / "run"),
        env=fake_probe_dir(tmp_path),
        timeout=120,
    )
    one_line_error(r, f"--confirm {value}: must be 0")
    assert not (tmp_path / "run").exists()
