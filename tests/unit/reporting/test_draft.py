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
    record.update(targets=["torch:cpu", "torch:cpu+foreach"], op="write:whole")
    assert (
        title(FindingRecord.from_json(record))
        == "torch: `write:whole` gives different values on `cpu` and `cpu+foreach`"
    )
