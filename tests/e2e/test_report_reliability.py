"""Reports against hostile and damaged run folders and unwritable destinations: ``aliasfuzz
report`` and ``report --history`` in real processes, ``write_reports`` / ``write_junit`` in
Python. Run folders are built by hand (campaign.json, findings.jsonl, findings.json, cases/
copied from tests/cases/); a full disk is a 64 KiB tmpfs, a read-only one a tmpfs remounted
``ro`` (both need root, else skipped).

Contract: bad input or an unwritable destination is one line naming the file (``aliasfuzz:
...``, exit 2; ``ReportError`` in Python), never a traceback, and nothing already written is lost
or overwritten; nothing is read or written outside the run folder.

The tests of this subject that run in-process are in tests/unit/reporting/test_report_reliability.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.reporting.junit import write_junit
from harness.reporting.report import ReportError, write_reports
from tests.conftest import run_cli
from tests.support.report_reliability import mount, one_line, tree
from tests.support.run_folders import DETACH_CASE, detach_result, make_run, record

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


# ------------------------------------------------------------------------------------------------
# 2. An unwritable destination: one line, the journal intact, the old report whole.


@pytest.fixture
def disk(tmp_path: Path):
    mnt = tmp_path / "disk"
    mount(mnt)
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
