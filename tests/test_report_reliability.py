"""Reports against hostile and damaged run folders and unwritable destinations: ``aliasfuzz
report`` and ``report --history`` in real processes, ``write_reports`` / ``write_junit`` in
Python. Run folders are built by hand (campaign.json, findings.jsonl, findings.json, cases/
copied from tests/cases/); a full disk is a 64 KiB tmpfs, a read-only one a tmpfs remounted
``ro`` (both need root, else skipped).

Contract: bad input or an unwritable destination is one line naming the file (``aliasfuzz:
...``, exit 2; ``ReportError`` in Python), never a traceback, and nothing already written is lost
or overwritten; nothing is read or written outside the run folder.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness.reporting.junit import write_junit
from harness.reporting.report import ReportError, write_reports
from harness.reporting.repro import table_rows
from tests.conftest import run_cli
from tests.support.run_folders import DETACH_CASE, TARGETS, detach_result, make_run, record

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


def tree(d: Path) -> dict[str, bytes]:
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def one_line(r: subprocess.CompletedProcess, *words: str) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("aliasfuzz: "), r.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


# ------------------------------------------------------------------------------------------------
# 1. Nothing outside the run folder is read or written.


@pytest.mark.parametrize("how", ["dotdot", "absolute", "symlink", "symlinked-dir"])
def test_a_case_path_out_of_the_run_folder_is_refused_for_that_finding(tmp_path, how):
    victim = tmp_path / "victim"
    victim.mkdir()
    shutil.copy(DETACH_CASE, victim / "x.toml")
    (victim / "x.json").write_text(json.dumps(detach_result([1.0, 2.0]).to_json()))
    before = tree(victim)
    run = tmp_path / "reports" / "run"
    bad = {
        "dotdot": "../../victim/x.toml",
        "absolute": str(victim / "x.toml"),
        "symlink": "cases/link.toml",
        "symlinked-dir": "outside/x.toml",
    }[how]
    make_run(run, [record(1), record(2, case=bad, repro=bad[: -len(".toml")] + ".json")])
    if how == "symlink":
        for name in ("x.toml", "x.json"):
            link = run / "cases" / f"link{Path(name).suffix}"
            link.unlink()  # make_run wrote a case there
            link.symlink_to(victim / name)
    if how == "symlinked-dir":
        (run / "outside").symlink_to(victim)
    r = run_cli("report", str(run))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stdout + r.stderr
    assert tree(victim) == before  # nothing written into (or next to) the outside file
    warnings = r.stderr.strip().splitlines()
    assert len(warnings) == 1 and "finding 2" in warnings[0] and "case path outside the run folder" in warnings[0]
    md, page = (run / "report.md").read_text(), (run / "report.html").read_text()
    for text in (md, page):
        assert "case path outside the run folder" in text and "finding number 2" in text
        assert "finding number 1" in text and "cases/001-00000001.torch.py" in text  # the rest is whole
    assert (run / "cases" / "001-00000001.torch.py").is_file()
    assert md.count("```toml") == 1  # only the good finding's case is shown


def test_repro_and_original_paths_out_of_the_run_folder_are_not_read(tmp_path):
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"targets": {"victim:secret": {"status": "ok"}}}))
    run = make_run(tmp_path / "run", [record(1, repro="../secret.json", original_case="../secret.json")])
    r = run_cli("report", str(run))
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
    r = run_cli("report", str(run))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert tree(victim) == {"keep.py": b"precious\n"}
    assert "reproducers not written" in (run / "report.md").read_text()


def test_a_case_that_is_not_a_regular_file_is_not_read(tmp_path):
    run = make_run(tmp_path / "run", [record(1)])
    (run / "cases" / "001-00000001.toml").unlink()
    os.mkfifo(run / "cases" / "001-00000001.toml")  # reading it would wait for a writer forever
    r = run_cli("report", str(run), timeout=60)
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
    r = run_cli("report", str(run))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert 'sentence: {"x": 1}' not in (run / "report.md").read_text()  # shown as its JSON text
    assert '{"x": 1}' in (run / "report.md").read_text()


# ------------------------------------------------------------------------------------------------
# 2. An unwritable destination: one line, the journal intact, the old report whole.


def _mount(path: Path, size: str = "256k") -> None:
    path.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, text=True
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip()}): needs root")


@pytest.fixture
def disk(tmp_path: Path):
    mnt = tmp_path / "disk"
    _mount(mnt)
    yield mnt
    subprocess.run(["umount", str(mnt)], check=False)


def _fill(mnt: Path) -> None:
    with open(mnt / "filler", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass


def _read_only(mnt: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)


def _damage(mnt: Path, run: Path, how: str) -> None:
    if how == "full":
        _fill(mnt)
    elif how == "read-only":
        _read_only(mnt)
    else:  # the report's path is a directory
        (run / "report.md").unlink()
        (run / "report.md").mkdir()


@pytest.mark.parametrize("count", [0, 1])
@pytest.mark.parametrize("how", ["full", "read-only", "directory"])
def test_report_on_an_unwritable_destination_is_one_line_and_loses_nothing(disk, how, count):
    run = make_run(disk / "run", [record(n) for n in range(1, count + 1)])
    r = run_cli("report", str(run))  # the reports and reproducers that must survive
    assert r.returncode == 0 and (run / "report.html").exists(), r.stderr
    assert count == 0 or (run / "cases" / "001-00000001-candle" / "src" / "main.rs").exists()
    before = {k: v for k, v in tree(run).items() if k != "report.md" or how != "directory"}
    _damage(disk, run, how)
    line = one_line(run_cli("report", str(run)), "report.md", "cannot write", "findings.jsonl", "intact")
    assert {"full": "No space left", "read-only": "Read-only", "directory": "Is a directory"}[how] in line
    after = tree(run)
    for name, data in before.items():  # nothing lost, nothing overwritten
        assert after.get(name) == data, name
    assert not [p for p in run.rglob(".*") if p.name != ".."], list(run.rglob(".*"))  # no temporary left


@pytest.mark.parametrize("how", ["full", "read-only", "directory"])
def test_write_reports_and_write_junit_raise_report_error(disk, how):
    run = make_run(disk / "run", [])
    junit = disk / "junit.xml"
    junit.write_text("OLD JUNIT\n")
    if how == "directory":
        (run / "report.md").mkdir()
        junit.unlink()
        junit.mkdir()
    else:
        _damage(disk, run, how)
    with pytest.raises(ReportError) as e:
        write_reports(run)
    assert "report.md" in str(e.value) and "findings.jsonl" in str(e.value) and "intact" in str(e.value)
    for findings in ([], [record(1)]):
        with pytest.raises(ReportError) as e:
            write_junit(findings, junit)
        assert "junit.xml" in str(e.value) and "findings.jsonl" in str(e.value) and "\n" not in str(e.value)
    if how != "directory":
        assert junit.read_text() == "OLD JUNIT\n"


def test_history_on_a_read_only_disk_is_one_line(disk):
    make_run(disk / "run1", [record(1)])
    _read_only(disk)
    one_line(run_cli("report", "--history", str(disk)), "history.html", "cannot write")


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
    one_line(run_cli("report", str(run), timeout=60), str(at_fault) if how != "no-state" else str(run))
    assert not (run / "report.md").exists()


def test_history_skips_damaged_folders_and_renders_the_rest(tmp_path):
    reports = tmp_path / "reports"
    make_run(reports / "good1", [record(1)])
    make_run(reports / "shard" / "good2", [record(1), harness_record(2)])
    for how in DAMAGE:
        _damaged(reports / how, how)
    (reports / "a-file").write_text("not a folder\n")
    (reports / "loop").symlink_to(reports, target_is_directory=True)
    r = run_cli("report", "--history", str(reports), timeout=60)
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
    r = run_cli("report", "--history", str(reports))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 3 and lines[-1].startswith("aliasfuzz: ") and "no run folder could be read" in lines[-1]
    assert not (reports / "history.html").exists()


# ------------------------------------------------------------------------------------------------
# 4. Harness errors: counted apart, shown first, a failing JUnit case each.


def test_harness_errors_are_counted_apart_and_shown_first(tmp_path):
    run = make_run(tmp_path / "run", [record(1), record(2, status="known", baseline="K1"), harness_record(3)])
    r = run_cli("report", str(run))
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
    r = run_cli("report", str(run))
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
    r = run_cli("report", str(run))
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


def test_only_new_and_flaky_findings_get_reproducers_and_a_known_one_names_its_baseline_case(tmp_path):
    """A run folder a person can open: reproducers for what is to be read, not for every known
    finding; the draft for a new one only."""
    from harness.reporting.report import write_reports

    statuses = {1: "new", 2: "flaky", 3: "known"}
    run = make_run(
        tmp_path / "run",
        [
            record(
                n,
                status=s,
                baseline="known-entry" if s == "known" else None,
                baseline_case="tests/cases/x.toml" if s == "known" else None,
            )
            for n, s in statuses.items()
        ],
    )
    write_reports(run)
    md = (run / "report.md").read_text()
    for n, status in statuses.items():
        stem = f"cases/{n:03d}-0000000{n}"
        assert (run / f"{stem}.torch.py").exists() == (status != "known"), (status, sorted(tree(run)))
        assert (run / f"{stem}.issue.md").exists() == (status == "new"), status
    assert "tests/cases/x.toml" in md
