"""Campaign options a careless or hostile user gives, and campaigns that run no program, through
the real command line with the TEST DOUBLE fake probe standing in as the ``candle`` binary.

- A chunk size is bounded (``options.MAX_CHUNK_SIZE``, checked by ``options.option_problem`` for the
  command line, bench, a resumed campaign.json and a shared campaign's Redis configuration alike): a chunk is drawn whole before it runs, so a
  billion-program chunk never ended and grew without bound, whatever the budget.
- A campaign that ran no program never reports "0 new" with exit 0: it is exit 2 with one line
  "ran no program" (a budget of no time without a corpus to replay, targets too slow for one
  program within the budget), and more workers than the machine can start are refused.
- ``--confirm -1`` is refused like every other option out of range.

The tests of this subject that run in-process are in tests/unit/fuzzing/test_campaign_options.py.
"""

from __future__ import annotations

import json
import time

import pytest

from harness.fuzzing.options import MAX_CHUNK_SIZE
from tests.conftest import run_cli
from tests.support.campaign_options import FUZZ
from tests.support.fake_targets import fake_probe_dir


def fuzz(tmp_path, *args: str, timeout: float = 120):
    return run_cli(*FUZZ, "--out", str(tmp_path / "run"), *args, env=fake_probe_dir(tmp_path), timeout=timeout)


def test_the_largest_chunk_size_keeps_to_the_budget(tmp_path):
    """A chunk of the maximum size is drawn and cut off in time: the campaign ends within its
    budget, the shrink grace (10 s at least) and the drain (``DRAIN_S``), plus start-up."""
    started = time.monotonic()
    r = fuzz(tmp_path, "--chunk-size", str(MAX_CHUNK_SIZE), "--budget", "2s", "--shrink-grace", "0", timeout=120)
    assert r.returncode in (0, 1), r.stdout[-2000:] + r.stderr[-2000:]
    assert time.monotonic() - started < 2 + 10 + 20


# -- campaigns that run no program ------------------------------------------------------------------


@pytest.mark.parametrize("budget", ["0s", "0m"])
def test_a_budget_of_no_time_without_a_corpus_runs_nothing_and_is_exit_2(tmp_path, budget):
    """``--budget 0s`` replays a corpus and nothing more (tests/e2e/test_campaign.py uses it so); with
    no corpus there is nothing to run, and that is never "0 new"."""
    r = fuzz(tmp_path, "--budget", budget, "--shrink-grace", "0")
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    assert r.stderr.strip().splitlines()[-1] == "aliasfuzz: ran no program, so nothing was compared (see the log above)"
    assert "0 new" in r.stdout  # the summary says what it found, the exit status that it is no result


def test_a_campaign_that_ran_no_program_is_exit_2_never_0_new(tmp_path):
    """Targets too slow to finish one program within the budget (20 s a program, a budget of 3 s
    and no shrink grace): the runner's deadline cuts the first chunk off, so nothing ran and
    nothing was compared."""
    r = run_cli(
        *FUZZ,
        "--out",
        str(tmp_path / "run"),
        "--budget",
        "3s",
        "--shrink-grace",
        "0",
        env=fake_probe_dir(tmp_path, "--slow-ms", "20000"),
        timeout=120,
    )
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    assert r.stderr.strip().splitlines()[-1] == "aliasfuzz: ran no program, so nothing was compared (see the log above)"
    assert "Traceback" not in r.stderr
    assert json.loads((tmp_path / "run" / "campaign.json").read_text())["programs"] == 0
