"""Bisection over releases: the version list, the scan and its summary (with a TEST DOUBLE
observer standing in for building a release), and reading a real reproducer's output back as a
trace. A real bisection builds each release from crates.io (minutes each): it is run by hand
(`aliasfuzz bisect`), not here.

The tests here run in this process, as the
unit tier requires; those that need real processes are in tests/e2e/test_bisect.py.
"""

from __future__ import annotations

import pytest

from harness.case.case_file import load_case
from harness.targets.reproducers import parse_output
from harness.triage.bisect import (
    BisectError,
    Observed,
    bisect,
    error_line,
    parse_versions,
    trace_of_output,
    verdict_words,
)
from tests.conftest import ROOT

RELEASES = ["0.8.0", "0.9.1", "0.9.2", "0.10.0", "0.10.2", "0.11.1"]


def test_versions_as_a_range_or_a_list():
    assert parse_versions("0.9.1..0.10.2", lambda: RELEASES) == ["0.9.1", "0.9.2", "0.10.0", "0.10.2"]
    assert parse_versions("0.11.1, 0.9.1", lambda: RELEASES) == ["0.11.1", "0.9.1"]
    for bad, why in (
        ("0.9.3..0.11.1", "0.9.3 is not a published release"),
        ("latest", "expected A..B"),
        ("", "expected A..B"),
    ):
        with pytest.raises(BisectError, match=why):
            parse_versions(bad, lambda: RELEASES)


def _fake_observer(shows_from: str, broken: set[str]):
    """TEST DOUBLE: a release "shows" the divergence (its clone follows) from ``shows_from`` on."""
    order = {v: i for i, v in enumerate(RELEASES)}

    def observe(v: str) -> Observed:
        if v in broken:
            return Observed(
                v, "does not build", build_s=1.0, message=f"this reproducer does not build against candle {v}"
            )
        return Observed(v, "ok", {"c": "follows" if order[v] >= order[shows_from] else "keeps"}, build_s=2.0)

    return observe


def test_the_scan_names_where_the_divergence_appears():
    lines = []
    result = bisect("candle", RELEASES, {"c": "keeps"}, _fake_observer("0.10.0", {"0.8.0", "0.9.2"}), lines.append)
    assert result.changes() == [("0.9.1", "0.10.0", True)]  # 0.9.2 did not build: the change is from 0.9.1
    assert result.summary() == "appears in 0.10.0 (absent in 0.9.1)"
    table = result.table()
    assert "| 0.9.2 | 1s | does not build: this reproducer does not build against candle 0.9.2 |" in table
    assert "| 0.10.0 | 2s | follows | yes |" in table and "| 0.9.1 | 2s | keeps | no |" in table
    assert len(lines) == len(RELEASES) and lines[0].startswith("candle 0.8.0: does not build")


def test_a_divergence_in_every_release_and_one_that_disappears():
    always = bisect("candle", RELEASES[1:], {"c": "keeps"}, _fake_observer("0.9.1", set()))
    assert always.summary() == "the divergence shows in every release observed (0.9.1 to 0.11.1)"
    fixed = bisect("candle", RELEASES, {"c": "follows"}, _fake_observer("0.10.2", set()))
    assert fixed.summary() == "disappears in 0.10.2 (shown in 0.10.0)"
    nothing = bisect("candle", ["0.9.1"], {"c": "keeps"}, _fake_observer("0.9.1", {"0.9.1"}))
    assert nothing.summary() == "no release built and ran: nothing to compare"


def test_a_reproducer_that_stops_at_an_ops_error_reads_as_that_ops_error():
    # What candle 0.9.1 to 0.11.1's reproducer of the flip candidate prints (RUST_BACKTRACE=1): the
    # states up to op 0, then main's `?` returns the flip's error, and a backtrace follows.
    program = load_case(ROOT / "tests" / "cases" / "candle_flip_of_a_strided_tensor_fails.toml")
    stdout = (
        "initial: w = [1.0, 2.0, 3.0, 4.0]\nafter op 0: w = [1.0, 2.0, 3.0, 4.0]\n"
        "after op 0: t = [1.0, 3.0, 2.0, 4.0]\n"
    )
    stderr = "Error: index-select only supports contiguous tensors\n   0: candle_core::error::Error::bt\n  22: _start\n"
    said = error_line(stderr, 1)
    assert said == "index-select only supports contiguous tensors"
    trace = trace_of_output(program, parse_output(stdout), "candle:0.11.1", said)
    assert [s.status for s in trace.steps] == ["ok", "error"] and trace.steps[1].message == said
    assert verdict_words(program, trace) == {"t": "unchanged", "f": "error"}
    assert (
        error_line("", 101) == "exit status 101" and error_line("thread panicked at x\n", 101) == "thread panicked at x"
    )
    b = bisect(
        "candle",
        ["0.11.1"],
        {"t": "unchanged", "f": "unchanged"},
        lambda v: Observed(v, "ok", verdict_words(program, trace), 1.0, said),
    )
    assert b.summary() == "the divergence shows in every release observed (0.11.1 to 0.11.1)"
    assert "| 0.11.1 | 1s | unchanged | error | yes (index-select only supports contiguous tensors) |" in b.table()


def test_a_checked_bisection_is_decided_by_what_each_reproducer_said():
    """TEST DOUBLE observer: rows from checked reproducers (``shows``) decide the divergence, with
    no snapshot verdict to compare (a failing call, a value after a step)."""
    said = {"0.9.1": False, "0.10.0": True, "0.10.2": True}

    def observe(v: str) -> Observed:
        message = "op 1: error: index-select only supports contiguous tensors" if said[v] else ""
        return Observed(v, "ok", {}, build_s=3.0, message=message, shows=said[v])

    result = bisect("candle", list(said), {}, observe)
    assert result.summary() == "appears in 0.10.0 (absent in 0.9.1)"
    table = result.table().splitlines()
    assert table[0] == "| candle | build | divergence | what the reproducer said |"
    assert "| 0.9.1 | 3s | does not show |  |" in table
    assert "| 0.10.0 | 3s | shows | op 1: error: index-select only supports contiguous tensors |" in table
