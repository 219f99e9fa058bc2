"""The side-by-side table model (``harness.reporting.table``): one divergence rule for the
terminal, the Markdown and the HTML views, the oracle's (``value_compare.values_close``, and no
value comparison of names whose values come from a framework's RNG). Traces are built by hand, so
no probe runs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from harness.case.case_file import parse_case
from harness.fuzzing.replay import ReproResult
from harness.judging.verdicts import verdicts
from harness.reporting.report import write_reports
from harness.reporting.repro import table_rows
from harness.reporting.table import build_table
from harness.targets.trace import Trace

# A uniform lazy tensor r (its values come from each framework's RNG), a clone of it, and a buffer
# b whose values the oracle does compare.
CASE = """format = "aliasfuzz-case/1"
title = "a uniform lazy tensor, a clone of it and a buffer"

[tensors]
r = { kind = "lazy", shape = [2], init = "uniform", seed = 7 }
b = { kind = "buffer", value = [1.0, 2.0] }

[[ops]]
op = "snapshot"
name = "rc"
of = "r"
method = "clone"
"""
TARGETS = ("torch:cpu", "candle:cpu")


def _obs(v: list[float]) -> dict:
    return {
        "shape": [len(v)],
        "value": v,
        "device": "cpu",
        "requires_grad": False,
        "identity": None,
        "initialized": True,
    }


def result(second_b: list[float]) -> ReproResult:
    """CASE on two targets whose RNGs give r different values, and whose final b are [1, 2] and
    ``second_b``."""
    import tomllib

    program = parse_case(tomllib.loads(CASE))
    traces = {}
    for tid, r, b in zip(TARGETS, ([0.25, 0.5], [0.75, -0.5]), ([1.0, 2.0], second_b)):
        traces[tid] = Trace.from_wire(
            tid,
            {
                "status": "ok",
                "initial": {"r": _obs(r), "b": _obs(b)},
                "steps": [{"status": "ok", "changed": {"rc": _obs(r)}}],
            },
        )
    return ReproResult(program, {}, traces, [], verdict_maps={t: verdicts(program, tr) for t, tr in traces.items()})


def run_folder(d: Path, res: ReproResult) -> Path:
    """A run folder with one finding whose case is CASE and whose repro JSON is ``res``'s."""
    (d / "cases").mkdir(parents=True)
    state = {
        "config": {"seed": 1},
        "programs": 1,
        "elapsed_s": 1.0,
        "next_chunk": 1,
        "runs": [],
        "targets": {t: {"versions": {}} for t in TARGETS},
        "unavailable": {},
    }
    (d / "campaign.json").write_text(json.dumps(state))
    (d / "cases" / "001-00000001.toml").write_text(CASE)
    (d / "cases" / "001-00000001.original.toml").write_text(CASE)
    (d / "cases" / "001-00000001.json").write_text(json.dumps(res.to_json()))
    rec = {
        "signature": "value|candle:cpu~torch:cpu|value|-|snapshot|changed~changed",
        "kind": "value",
        "status": "new",
        "targets": list(TARGETS),
        "sentence": "b differs",
        "case": "cases/001-00000001.toml",
        "original_case": "cases/001-00000001.original.toml",
        "repro": "cases/001-00000001.json",
    }
    (d / "findings.jsonl").write_text(json.dumps(rec) + "\n")
    return d


def html_rows(page: str) -> dict[str, bool]:
    return {label: "divergent" in cls for cls, label in re.findall(r'<tr class="([^"]*)"><td>([^<]*)</td>', page)}


def md_rows(md: str, labels) -> dict[str, bool]:
    out = {}
    for label in labels:
        marked, plain = f"| **⚠ {label}** |" in md, f"| {label} |" in md
        assert marked != plain, (label, md)
        out[label] = marked
    return out


def test_a_uniform_lazy_tensor_and_its_clone_are_never_highlighted():
    for second_b in ([1.0, 2.0], [1.0, 3.0]):
        rows = {
            r.name: r
            for r in build_table(result(second_b).program, result(second_b).traces, result(second_b).verdict_maps).rows
        }
        assert set(rows) == {"r", "b", "rc"}
        assert not rows["r"].divergent  # its values differ, by design of the RNG
        assert not rows["rc"].divergent  # a snapshot row is judged by its verdicts (unchanged on both)
        assert rows["b"].divergent == (second_b != [1.0, 2.0])


@pytest.mark.parametrize("second_b", [[1.0, 2.0], [1.0, 2.0000002], [1.0, 3.0]])
def test_terminal_markdown_and_html_mark_the_same_rows(tmp_path, second_b):
    res = result(second_b)
    terminal = {label: divergent for label, _, divergent in table_rows(res)}
    assert terminal["r"] is False
    assert terminal["b"] is (second_b != [1.0, 2.0])  # exact comparison: no Adam step in the case
    run = run_folder(tmp_path / "run", res)
    write_reports(run)
    assert html_rows((run / "report.html").read_text()) == terminal
    assert md_rows((run / "report.md").read_text(), terminal) == terminal


def test_rows_come_in_the_programs_order_whatever_the_traces_hold():
    res = result([1.0, 2.0])
    assert [label for label, _, _ in table_rows(res)] == ["r", "b", "rc (clone)"]
