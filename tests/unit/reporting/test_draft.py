"""``aliasfuzz draft``: the reproducers and the upstream report draft of any case file, made by the
code a campaign's report uses, on the real frameworks.

The tests here run in this process (the command line through ``run_cli_in_process``), as the
unit tier requires; those that need real processes are in tests/e2e/test_draft.py.
"""

from __future__ import annotations

import json

from tests.conftest import CASES, run_cli_in_process


def test_a_bad_bisection_file_is_one_line_naming_the_file_and_field(tmp_path):
    bad = tmp_path / "bisect.json"
    bad.write_text(json.dumps({"framework": "candle", "reference": {}}))
    r = run_cli_in_process(
        "draft",
        str(CASES / "candle_flip_of_a_strided_tensor_fails.toml"),
        "--bisect",
        str(bad),
        "--out",
        str(tmp_path / "out"),
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert str(bad) in r.stderr and "`releases`" in r.stderr
    assert not (tmp_path / "out").exists()  # nothing written before every input was checked


def test_an_eager_against_compiled_finding_is_titled_by_the_mode_not_the_device_ids():
    from harness.judging.finding import FindingRecord
    from harness.reporting.issue_draft import title

    record = json.loads((CASES.parent / "records" / "sharing_finding.json").read_text())
    record.update(
        kind="variant",
        aspect="value",
        op="forward",
        sides=["changed", "changed"],
        targets=["torch:cpu", "torch:cpu+compile"],
        signature="variant|torch:cpu~torch:cpu+compile|value|-|forward|changed~changed",
    )
    assert title(FindingRecord.from_json(record)) == (
        "torch: `forward` gives different values in eager mode and under `torch.compile(backend='aot_eager')`"
    )
    # Inductor's variant names its own backend, whichever side it is on
    record.update(targets=["torch:cpu+inductor", "torch:cpu"])
    assert title(FindingRecord.from_json(record)) == (
        "torch: `forward` gives different values in eager mode and under `torch.compile(backend='inductor')`"
    )
    record.update(targets=["torch:cpu", "torch:cpu+foreach"], op="write:whole")
    assert (
        title(FindingRecord.from_json(record))
        == "torch: `write:whole` gives different values on `cpu` and `cpu+foreach`"
    )


def _inductor_record(aspect: str, op: str, method: str | None, sides: list[str]):
    """A variant finding between eager torch and its Inductor variant, ``torch:cpu`` first."""
    from harness.judging.finding import FindingRecord

    record = json.loads((CASES.parent / "records" / "sharing_finding.json").read_text())
    targets = ["torch:cpu", "torch:cpu+inductor"]
    signature = f"variant|{'~'.join(targets)}|{aspect}|{method or '-'}|{op}|{'~'.join(sides)}"
    record.update(
        kind="variant", aspect=aspect, op=op, method=method, sides=sides, targets=targets, signature=signature
    )
    return FindingRecord.from_json(record)


def test_a_compiled_snapshot_that_changes_copy_semantics_is_the_observed_side():
    """Between eager and compiled torch, copy semantics are eager's (AOTAutograd regenerates the
    aliasing of outputs to inputs by design): the compiled side is the one the draft reports,
    whichever side of the signature it is on, and the title names the snapshot's method."""
    from harness.reporting.issue_draft import expectation, title

    rec = _inductor_record(aspect="verdict", op="write", method="mul1", sides=["keeps", "follows"])
    assert title(rec) == (
        "torch: a `mul1` snapshot gives different copy semantics in eager mode and under "
        "`torch.compile(backend='inductor')`"
    )
    seen, seen_words, wanted, wanted_words, _ = expectation(rec, None)
    assert (seen, seen_words) == ("`torch:cpu+inductor`", "follows the write")
    assert (wanted, wanted_words) == ("`torch:cpu`", "keeps its value")


def test_a_compiled_variant_that_moves_other_version_counters_is_the_observed_side():
    """Every in-place op bumps the counters the autograd notes describe: between eager and compiled
    torch, the side that kept a counter the other bumped is the one the draft reports, and its
    repro command names both targets (the Inductor variant runs only where it is named)."""
    from harness.reporting.issue_draft import expectation, issue_markdown, title

    rec = _inductor_record(aspect="version", op="write:row", method="chunk", sides=["bumped", "kept"])
    assert title(rec) == (
        "torch: a `chunk` gives different version counters in eager mode and under `torch.compile(backend='inductor')`"
    )
    seen, seen_words, wanted, wanted_words, _ = expectation(rec, None)
    assert (seen, seen_words, wanted, wanted_words) == ("`torch:cpu+inductor`", "kept", "`torch:cpu`", "bumped")
    # ... but eager torch is the side that keeps a counter compiled torch bumps (pytorch#13402)
    eager = _inductor_record(aspect="version", op="forward", method=None, sides=["kept", "bumped"])
    assert expectation(eager, None)[:2] == ("`torch:cpu`", "kept")
    assert title(eager).startswith("torch: `forward` gives different version counters in eager mode")
    text = issue_markdown(rec, "case.toml", 'format = "aliasfuzz-case/1"\n', None)
    assert "aliasfuzz repro case.toml --targets torch:cpu,torch:cpu+inductor" in text
