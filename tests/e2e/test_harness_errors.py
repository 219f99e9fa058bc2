"""Harness errors: an exception inside aliasfuzz itself is contained at every level.

The exception comes from the oracle's TEST DOUBLE switch ``ALIASFUZZ_TEST_ORACLE_FAULT=fill``
(``oracle.injected_fault``): ``compare`` raises for every program with a ``fill`` op. The
targets are the TEST DOUBLE fake probe (tests/fakes/), standing in for nothing but itself; at
campaign and CLI level it is the ``candle`` binary through ``ALIASFUZZ_PROBE_DIR``. Each test
checks that the error is a ``harness-error`` finding with its traceback, shrunk to a program that
still raises the same exception at the same place, and that everything else goes on.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.case.case_file import load_case
from harness.case.ir import Program, TensorDecl, check_program
from harness.fuzzing.baseline import Baseline
from harness.fuzzing.engine import Engine
from harness.judging import rules
from harness.judging.harness_errors import HARNESS_ERROR, safe_compare
from harness.judging.oracle import FAULT_ENV
from harness.targets.runner import Runner
from tests.conftest import run_cli
from tests.fakes.targets import fake_target
from tests.support.fake_targets import probe_dir as _probe_dir

W = TensorDecl("w", "param", (2,), (1.0, 2.0))
B = TensorDecl("b", "buffer", (3,), (0.0, 1.0, 2.0))


def program(tensors, ops) -> Program:
    tensors = tuple(tensors)
    return Program(tensors, check_program(tensors, ops))


# A program with the planted clone divergence and, among other ops, the fill that makes the
# oracle raise; and one with the planted divergence only.
WITH_FILL = program(
    [W, B],
    [
        {"op": "snapshot", "name": "c", "of": "w", "method": "clone"},
        {"op": "scale", "target": "b", "factor": 2.0},
        {"op": "fill", "target": "b", "value": 3.0},
        {"op": "write", "target": "w", "index": None, "value": [5.0, 6.0]},
    ],
)
PLANTED_ONLY = program(
    [W],
    [
        {"op": "snapshot", "name": "c", "of": "w", "method": "clone"},
        {"op": "write", "target": "w", "index": None, "value": [5.0, 6.0]},
    ],
)


@pytest.fixture(scope="module")
def fake_runner():
    r = Runner([fake_target("ref"), fake_target("planted")])
    yield r
    r.close()


def test_an_oracle_exception_is_a_harness_error_finding_with_its_traceback(fake_runner, monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "fill")
    (f,) = safe_compare(WITH_FILL, fake_runner.run_one(WITH_FILL))
    assert f.kind == HARNESS_ERROR and f.sides == ("InjectedFault", "harness/judging/oracle.py:injected_fault")
    assert "Traceback" in f.detail and "injected_fault" in f.detail
    assert "a bug of aliasfuzz" in f.sentence() and "\n" not in f.sentence()
    assert f.rule == rules.HARNESS_ERROR.name
    # The signature names the place, not the targets that ran the program.
    (g,) = safe_compare(WITH_FILL, fake_runner.subset(["fake:ref"]).run_one(WITH_FILL))
    assert g.signature == f.signature


def test_engine_records_the_harness_error_shrunk_and_keeps_finding_the_rest(fake_runner, monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "fill")
    engine = Engine(fake_runner, Baseline([]), shrink_time_s=30)
    recorded = []
    engine.process([WITH_FILL, PLANTED_ONLY], recorded.append)
    errors = [r for r in recorded if r.finding.kind == HARNESS_ERROR]
    assert len(errors) == 1
    (err,) = errors
    assert err.status == "new" and err.baseline is None
    # Shrunk against "still raises the same exception at the same place": the fill alone.
    assert [op["op"] for op in err.minimized.ops] == ["fill"]
    assert len(err.minimized.tensors) == 1
    # The program without a fill is still judged: the planted clone is found.
    assert {r.finding.aspect for r in recorded if r.finding.kind != HARNESS_ERROR} >= {"verdict"}


def test_an_exception_while_recording_a_finding_is_a_harness_error_and_the_engine_goes_on(fake_runner):
    engine = Engine(fake_runner, Baseline([]), shrink_time_s=5)
    recorded = []

    def on_new(rec):
        if rec.finding.kind != HARNESS_ERROR and not recorded:
            recorded.append("raised")
            raise KeyError("a bug in the recording code")
        recorded.append(rec)

    engine.process([PLANTED_ONLY], on_new)
    errors = [r for r in recorded if r != "raised" and r.finding.kind == HARNESS_ERROR]
    assert len(errors) == 1 and errors[0].finding.op_label == "record"
    assert errors[0].finding.sides[0] == "KeyError"
    assert any(r != "raised" and r.finding.kind != HARNESS_ERROR for r in recorded)  # the next finding


def _campaign_env(tmp_path: Path) -> dict:
    return {
        "ALIASFUZZ_PROBE_DIR": str(_probe_dir(tmp_path)),
        FAULT_ENV: "fill",
        "ALIASFUZZ_BUG_DIR": str(tmp_path / "bugs"),
    }


def test_campaign_saves_the_harness_error_as_a_finding_and_runs_to_its_end(tmp_path: Path):
    out = tmp_path / "run"
    result = run_cli(
        "fuzz",
        "--max-programs",
        "128",
        "--seed",
        "7",
        "--profile",
        "quick",
        "--targets",
        "candle",
        "--shrink-time",
        "10",
        "--chunk-size",
        "32",
        "--out",
        str(out),
        env=_campaign_env(tmp_path),
        timeout=600,
    )
    assert result.returncode == 3, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    state = json.loads((out / "campaign.json").read_text())
    assert state["programs"] >= 128  # nothing ended it early
    records = [json.loads(line) for line in (out / "findings.jsonl").read_text().splitlines()]
    errors = [r for r in records if r["kind"] == HARNESS_ERROR]
    assert len(errors) == 1, records
    (err,) = errors
    assert "Traceback" in err["detail"] and err["status"] == "new"
    case = load_case(out / err["case"])
    assert [op["op"] for op in case.ops] == ["fill"]  # shrunk: still raises at the same place
    assert "HARNESS ERROR" in result.stderr and err["case"] in result.stderr
    # The planted divergence is still found in the programs without a fill.
    assert any(r["kind"] != HARNESS_ERROR for r in records)
    # The report lists the harness errors first.
    report = (out / "report.md").read_text()
    assert "Harness errors" in report
    assert report.index("Harness errors") < report.index(records[-1]["sentence"][:30]) or len(records) == 1


def test_repro_of_a_case_that_makes_the_harness_raise_is_a_bug_report_with_the_case(tmp_path: Path):
    case = tmp_path / "fills.toml"
    case.write_text(
        'format = "aliasfuzz-case/1"\n[tensors.w]\nkind = "param"\nvalue = [1.0, 2.0]\n'
        '[[ops]]\nop = "fill"\ntarget = "w"\nvalue = 3.0\n'
    )
    env = {**_campaign_env(tmp_path)}
    result = run_cli("repro", str(case), "--targets", "candle", env=env, timeout=120)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    (line,) = [text for text in result.stderr.splitlines() if text.startswith("aliasfuzz:")]
    assert "InjectedFault" in line and "bug report: " in line
    report = Path(line.split("bug report: ", 1)[1].rstrip(")"))
    text = report.read_text()
    assert "Traceback" in text and 'op = "fill"' in text and str(case) in text


def test_minimize_of_such_a_case_shrinks_the_harness_error(tmp_path: Path):
    case = tmp_path / "fills.toml"
    case.write_text(
        'format = "aliasfuzz-case/1"\n[tensors.w]\nkind = "param"\nvalue = [1.0, 2.0]\n'
        '[tensors.b]\nkind = "buffer"\nvalue = [0.0]\n'
        '[[ops]]\nop = "scale"\ntarget = "b"\nfactor = 2.0\n'
        '[[ops]]\nop = "fill"\ntarget = "w"\nvalue = 3.0\n'
    )
    out = tmp_path / "min.toml"
    result = run_cli(
        "minimize",
        str(case),
        "--targets",
        "candle",
        "--out",
        str(out),
        "--time",
        "20",
        env=_campaign_env(tmp_path),
        timeout=120,
    )
    assert result.returncode == 3, result.stdout + result.stderr
    assert "harness-error" in result.stdout and "Traceback" not in result.stderr
    assert [op["op"] for op in load_case(out).ops] == ["fill"]
