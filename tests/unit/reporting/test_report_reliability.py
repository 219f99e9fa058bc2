"""Reports against hostile and damaged run folders and unwritable destinations: ``aliasfuzz
report`` and ``report --history`` in real processes, ``write_reports`` / ``write_junit`` in
Python. Run folders are built by hand (campaign.json, findings.jsonl, findings.json, cases/
copied from tests/cases/); a full disk is a 64 KiB tmpfs, a read-only one a tmpfs remounted
``ro`` (both need root, else skipped).

Contract: bad input or an unwritable destination is one line naming the file (``aliasfuzz:
...``, exit 2; ``ReportError`` in Python), never a traceback, and nothing already written is lost
or overwritten; nothing is read or written outside the run folder.

The tests here run in this process (the command line through ``run_cli_in_process``), as the
unit tier requires; those that need real processes are in tests/e2e/test_report_reliability.py.
"""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness.reporting.junit import write_junit
from harness.reporting.repro import table_rows
from tests.conftest import run_cli_in_process
from tests.support.report_reliability import one_line, tree
from tests.support.run_folders import TARGETS, detach_result, make_run, record

TRACEBACK = (
    'Traceback (most recent call last):\n  File "harness/judging/oracle.py", line 310, in _value_finding\n'
    "    return values[k] < ```limit```\nIndexError: list index out of range <&>"
)


# ------------------------------------------------------------------------------------------------
# Building run folders by hand.


def harness_record(n: int) -> dict:
    return record(
        n,
        kind="harness-error",
        aspect="harness",
        op="oracle",
        method=None,
        targets=list(TARGETS),
        signature="harness-error|oracle|IndexError|harness/judging/oracle.py:_value_finding",
        sentence="aliasfuzz itself raised IndexError at harness/judging/oracle.py:_value_finding while at stage "
        "`oracle` (list index out of range): a bug of aliasfuzz, not of a framework.",
        detail=TRACEBACK,
        shrink_seconds=None,
        shrink_complete=None,
        shrink_runs=None,
    )


def test_repro_and_original_paths_out_of_the_run_folder_are_not_read(tmp_path):
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"targets": {"victim:secret": {"status": "ok"}}}))
    run = make_run(tmp_path / "run", [record(1, repro="../secret.json", original_case="../secret.json")])
    r = run_cli_in_process("report", str(run))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr  # one line for the finding
    for text in ((run / "report.md").read_text(), (run / "report.html").read_text()):
        assert "victim:secret" not in text and "repro path outside the run folder" in text
        assert "original_case path outside the run folder" in text and 'secret.json">' not in text


def test_reproducers_never_write_through_a_link_out_of_the_folder(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.py").write_text("precious\n")
    run = make_run(tmp_path / "run", [record(1)])
    (run / "cases" / "001-00000001.torch.py").symlink_to(victim / "keep.py")
    (run / "cases" / "001-00000001-candle").symlink_to(victim, target_is_directory=True)
    r = run_cli_in_process("report", str(run))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert tree(victim) == {"keep.py": b"precious\n"}
    assert "reproducers not written" in (run / "report.md").read_text()


def test_a_case_that_is_not_a_regular_file_is_not_read(tmp_path):
    run = make_run(tmp_path / "run", [record(1)])
    (run / "cases" / "001-00000001.toml").unlink()
    os.mkfifo(run / "cases" / "001-00000001.toml")  # reading it would wait for a writer forever
    r = run_cli_in_process("report", str(run), timeout=60)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "cases/001-00000001.toml cannot be read" in (run / "report.md").read_text()


def test_odd_field_types_are_shown_not_a_traceback(tmp_path):
    # Fields the run folder does not check (RunFolder checks the paths' and a few others' types).
    run = make_run(
        tmp_path / "run",
        [
            record(
                1,
                targets=5,
                sentence={"x": 1},
                op=[1],
                detail=["a"],
                baseline=3,
                ops_before="many",
                seconds_to_find={"s": 1},
                case="cases/",
            )
        ],
    )
    r = run_cli_in_process("report", str(run))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert 'sentence: {"x": 1}' not in (run / "report.md").read_text()  # shown as its JSON text
    assert '{"x": 1}' in (run / "report.md").read_text()


# ------------------------------------------------------------------------------------------------
# 3. Damaged run folders.


def _damaged(d: Path, how: str) -> Path:
    """A run folder damaged in one way; returns the file at fault."""
    make_run(d, [record(1)])
    if how == "state-not-json":
        (d / "campaign.json").write_text('{"programs": ')
    elif how == "state-not-object":
        (d / "campaign.json").write_text("[1, 2]")
    elif how == "state-binary":
        (d / "campaign.json").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe")
    elif how == "state-bad-field":
        (d / "campaign.json").write_text('{"programs": "many", "config": []}')
    elif how == "state-is-a-fifo":
        (d / "campaign.json").unlink()
        os.mkfifo(d / "campaign.json")
    elif how == "state-is-a-folder":
        (d / "campaign.json").unlink()
        (d / "campaign.json").mkdir()
    elif how == "journal-line-not-object":
        with open(d / "findings.jsonl", "a") as f:
            f.write("5\n")
    elif how == "journal-binary":
        (d / "findings.jsonl").write_bytes(b"\x00\xff\xfe\x80binary\n")
    elif how == "journal-is-a-folder":
        (d / "findings.jsonl").unlink()
        (d / "findings.jsonl").mkdir()
    elif how == "journal-record-bad-type":
        (d / "findings.jsonl").write_text(json.dumps(record(1, case=17)) + "\n")
    elif how == "no-state":
        (d / "campaign.json").unlink()
    return d / ("findings.jsonl" if how.startswith("journal") else "campaign.json")


DAMAGE = [
    "state-not-json",
    "state-not-object",
    "state-binary",
    "state-bad-field",
    "state-is-a-fifo",
    "state-is-a-folder",
    "journal-line-not-object",
    "journal-record-bad-type",
    "journal-binary",
    "journal-is-a-folder",
    "no-state",
]


@pytest.mark.parametrize("how", DAMAGE)
def test_report_of_a_damaged_run_folder_is_one_line_naming_it(tmp_path, how):
    run = tmp_path / "run"
    at_fault = _damaged(run, how)
    one_line(run_cli_in_process("report", str(run), timeout=60), str(at_fault) if how != "no-state" else str(run))
    assert not (run / "report.md").exists()


def test_history_skips_damaged_folders_and_renders_the_rest(tmp_path):
    reports = tmp_path / "reports"
    make_run(reports / "good1", [record(1)])
    make_run(reports / "shard" / "good2", [record(1), harness_record(2)])
    for how in DAMAGE:
        _damaged(reports / how, how)
    (reports / "a-file").write_text("not a folder\n")
    (reports / "loop").symlink_to(reports, target_is_directory=True)
    r = run_cli_in_process("report", "--history", str(reports), timeout=60)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == len(DAMAGE), r.stderr
    for how in DAMAGE:
        assert sum(f"{reports / how}:" in line for line in lines) == 1, (how, r.stderr)
    page = (reports / "history.html").read_text()
    assert "good1" in page and "shard/good2" in page and page.count('class="bar-new"') == 2
    assert "state-binary" in page  # the skipped folders are listed on the page too


def test_history_with_no_readable_folder_exits_2(tmp_path):
    reports = tmp_path / "reports"
    for how in ("state-not-json", "journal-binary"):
        _damaged(reports / how, how)
    r = run_cli_in_process("report", "--history", str(reports))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 3 and lines[-1].startswith("aliasfuzz: ") and "no run folder could be read" in lines[-1]
    assert not (reports / "history.html").exists()


# ------------------------------------------------------------------------------------------------
# 4. Harness errors: counted apart, shown first, a failing JUnit case each.


def test_harness_errors_are_counted_apart_and_shown_first(tmp_path):
    run = make_run(tmp_path / "run", [record(1), record(2, status="known", baseline="K1"), harness_record(3)])
    r = run_cli_in_process("report", str(run))
    assert r.returncode == 0, r.stderr
    assert "1 harness error" in r.stdout and "findings: 1 new, 1 known" in r.stdout
    title = "Harness errors: aliasfuzz bugs, not framework findings"
    md = (run / "report.md").read_text()
    assert md.index(f"## {title} (1)") < md.index("## Summary") < md.index("## Findings (1 new, 1 known)")
    section = md[md.index(title) : md.index("## Summary")]
    assert "````text\n" + TRACEBACK + "\n````" in section  # a fence longer than the ``` inside
    assert "finding number 3" not in md[md.index("## Findings") :]
    page = (run / "report.html").read_text()
    assert page.index('<section id="harness-errors">') < page.index('<section id="summary">')
    assert f"<h2>{title} (1)</h2>" in page and "Findings (1 new, 1 known)" in page
    pre = re.search(r'<pre class="traceback">(.*?)</pre>', page, re.S)
    assert pre and "IndexError: list index out of range &lt;&amp;&gt;" in pre.group(1)
    assert "<td>1 (aliasfuzz bugs, not framework findings)</td>" in page
    assert not list((run / "cases").glob("003-*.torch.py"))  # no framework reproducer for an aliasfuzz bug


def test_junit_has_one_failing_case_per_harness_error(tmp_path):
    second = {
        **harness_record(4),
        "signature": "harness-error|shrink|KeyError|harness/shrinking/minimize.py:_drop",
        "detail": "Traceback ...\nKeyError: 'x\x00\x1b'",
    }
    path = write_junit(
        [record(1), record(2, status="known", baseline="K1"), harness_record(3), second], tmp_path / "junit.xml"
    )
    root = ET.parse(path).getroot()  # parses: control characters an exception carried are replaced
    cases = root.findall(".//testcase")
    harness = [c for c in cases if c.get("classname") == "aliasfuzz.harness"]
    assert len(harness) == 2 and cases[:2] == harness  # first
    for c in harness:
        assert c.find("failure") is not None and c.find("failure").get("type") == "harness-error"
    assert "IndexError: list index out of range <&>" in harness[0].find("failure").text
    assert root.get("tests") == "4" and root.get("failures") == "3"
    assert [c.find("failure") is not None for c in cases[2:]] == [True, False]


# ------------------------------------------------------------------------------------------------
# The side-by-side table marks divergent rows by the terminal table's rule.


@pytest.mark.parametrize("second_b", [[1.0, 2.0000002], [1.0, 2.0]])
def test_divergent_rows_follow_the_terminal_tables_rule(tmp_path, second_b):
    result = detach_result(second_b)
    terminal = {label: divergent for label, _, divergent in table_rows(result)}
    run = make_run(tmp_path / "run", [record(1)], repro=result.to_json())
    r = run_cli_in_process("report", str(run))
    assert r.returncode == 0, r.stderr
    page = (run / "report.html").read_text()
    rows = re.findall(r'<tr class="([^"]*)"><td>([^<]*)</td>', page)
    assert {label: "divergent" in cls for cls, label in rows} == terminal
    md = (run / "report.md").read_text()
    for label, divergent in terminal.items():
        assert (f"| **⚠ {label}** |" in md) == divergent, (label, md)


def test_known_findings_are_one_table_of_root_causes_after_the_new(tmp_path):
    known = dict(
        status="known",
        baseline="candle-clone-shares-storage",
        baseline_case="tests/cases/candle_clone_shares_storage.toml",
    )
    run = make_run(
        tmp_path / "run",
        [
            record(1, **known, seconds_to_find=2.0),
            record(2),
            record(3, **known, seconds_to_find=0.7),
            record(4, status="known", baseline="gone-entry"),
        ],
    )
    r = run_cli_in_process("report", str(run))
    assert r.returncode == 0, r.stderr
    md = (run / "report.md").read_text()
    assert md.index("### 1. [new]") < md.index("## Known root causes (2)")
    assert "finding number 1" not in md and "finding number 3" not in md  # no section of their own
    row = next(line for line in md.splitlines() if line.startswith("| `candle-clone-shares-storage` |"))
    assert (
        "| 2 | 0.7s |" in row
        and "huggingface/candle" in row
        and "`tests/cases/candle_clone_shares_storage.toml`" in row
    )
    assert "| `gone-entry` | 1 |" in md and "(not in the baseline any more)" in md
    page = (run / "report.html").read_text()
    assert (
        '<section id="known"><h2>Known root causes (2)</h2>' in page
        and 'id="known-candle-clone-shares-storage"' in page
    )
    assert page.index('<section id="findings">') < page.index('<section id="known">')
