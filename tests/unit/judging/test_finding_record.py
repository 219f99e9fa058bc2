"""The finding record (``harness.judging.finding.FindingRecord``): the one form of a finding in the
run folder, built once by the campaign, read back by the reports; and the campaign workers'
messages, which carry it between processes."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

from harness.fuzzing import messages
from harness.judging.finding import PATH_FIELDS, Finding, FindingRecord, stored_record

FINDING = Finding(
    kind="framework",
    aspect="verdict",
    targets=("candle:cpu", "torch:cpu"),
    op_label="step",
    method="clone",
    sides=("follows", "keeps"),
    op_index=1,
    subject="c",
)
VERSIONS = {"candle:cpu": {"candle-core": "0.11"}, "torch:cpu": {"torch": "2.1"}, "burn:flex": {"burn": "0.2"}}
SHRINK = SimpleNamespace(seconds=1.23456, complete=True, runs=17, hypothesis_runs=4)

# The record's JSON keys, in the order findings.json has always listed them.
KEYS = [
    "signature",
    "kind",
    "aspect",
    "status",
    "baseline",
    "targets",
    "op",
    "method",
    "sides",
    "values",
    "at",
    "sentence",
    "detail",
    "ops_before",
    "ops_after",
    "seconds_to_find",
    "shrink_seconds",
    "shrink_complete",
    "shrink_runs",
    "shrink_hypothesis_runs",
    "versions",
]


def found(**over) -> FindingRecord:
    kw = dict(
        status="new",
        baseline=None,
        baseline_case=None,
        ops_before=9,
        ops_after=2,
        seconds_to_find=0.12345,
        shrink=SHRINK,
        versions=VERSIONS,
    )
    kw.update(over)
    return FindingRecord.found(FINDING, **kw)


def test_a_found_record_serialises_in_the_journals_form():
    doc = found().to_json()
    assert list(doc) == KEYS + ["confirmed", "confirm_runs", "rule"] + list(PATH_FIELDS)
    assert doc["signature"] == FINDING.signature and doc["sentence"] == FINDING.sentence()
    assert doc["targets"] == ["candle:cpu", "torch:cpu"] and doc["sides"] == ["follows", "keeps"]
    assert doc["versions"] == {t: VERSIONS[t] for t in FINDING.targets}  # only the finding's targets
    assert (doc["seconds_to_find"], doc["shrink_seconds"], doc["shrink_runs"]) == (0.123, 1.235, 17)
    assert all(doc[k] is None for k in PATH_FIELDS)  # the run folder gives the paths
    assert (doc["confirmed"], doc["confirm_runs"]) == (None, None)  # not confirmed
    assert (found(confirmed=(2, 3)).to_json()["confirmed"], found(confirmed=(2, 3)).to_json()["confirm_runs"]) == (2, 3)
    unshrunk = found(shrink=None).to_json()
    assert all(
        unshrunk[k] is None for k in ("shrink_seconds", "shrink_complete", "shrink_runs", "shrink_hypothesis_runs")
    )


def test_a_known_record_names_its_baseline_case():
    doc = found(status="known", baseline="K1", baseline_case="tests/cases/x.toml").to_json()
    assert list(doc) == KEYS + ["baseline_case", "confirmed", "confirm_runs", "rule"] + list(PATH_FIELDS)
    assert doc["baseline_case"] == "tests/cases/x.toml"
    assert "baseline_case" not in found(baseline_case="ignored without a baseline").to_json()


def test_stored_paths_keep_their_place_and_the_record_reads_back():
    rec = found(status="known", baseline="K1", baseline_case="b.toml")
    doc = stored_record(rec.to_json(), case="cases/001-x.toml", original_case="cases/001-x.original.toml", repro=None)
    assert list(doc) == list(rec.to_json())
    back = FindingRecord.from_json(doc)
    assert back.case == "cases/001-x.toml" and back.repro is None
    assert FindingRecord.from_json(rec.to_json()) == rec


def test_from_json_reads_any_record_as_text_never_failing():
    odd = FindingRecord.from_json(
        {
            "signature": "s",
            "targets": 5,
            "sentence": {"x": 1},
            "op": [1],
            "baseline": 3,
            "ops_before": "many",
            "extra": "ignored",
        }
    )
    assert (odd.targets, odd.sentence, odd.op, odd.baseline, odd.ops_before) == (("5",), '{"x": 1}', "[1]", "3", "many")
    bare = FindingRecord.from_json({})
    assert (bare.signature, bare.kind, bare.sentence, bare.targets, bare.status) == ("?", "?", "", (), None)


def test_worker_messages_survive_a_process_boundary():
    for msg in (
        messages.TargetsOpened({"torch:cpu": {"kind": "cpu"}}, {"burn": "not built"}),
        messages.FindingFound(found(), "# min\n", "# orig\n", {"targets": {}}),
        messages.Progress(64, 3, 2),
        messages.Progress(5, None, 0),
        messages.RanNowhere(1),
        messages.LogLine("a line"),
        messages.WorkerError("worker 1: boom", harness=True),
        messages.WorkerDone(1),
    ):
        assert pickle.loads(pickle.dumps(msg)) == msg


def test_every_verdict_a_snapshot_can_get_reads_as_words():
    # A verdict is one event kind, or the same kind for a write into the snapshot (``rev``:
    # ``trace.Verdict.summary``); a sentence that shows the bare token reads as a defect.
    for verdict in ("follows", "keeps", "other"):
        for token in (verdict, f"rev {verdict}"):
            finding = Finding(
                kind="framework",
                aspect="verdict",
                targets=("burn:flex", "torch:cpu"),
                op_label="write",
                method="flip",
                sides=("keeps", token),
                op_index=2,
                subject="s0",
            )
            assert f"but {token} on" not in finding.sentence(), token
