"""A triage store that is foreign, empty, older, read-only, locked or damaged, and damaged files
beside it (issue 40, faults 9, 14, 19a, 19d), through the real ``aliasfuzz`` command line on real
SQLite files. A lock is a real SQLite lock held by another process; read-only media is a real
read-only bind mount (as root, in a mount namespace of the command's own) or a folder without
write permission (as another user).

The tests of this subject that run in-process are in tests/unit/triage/test_triage_store_hostile.py.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import PY, ROOT, run_cli
from tests.support.fake_targets import fake_probe_dir
from tests.support.triage_store_hostile import new_store, old_store, one_line


@contextmanager
def _read_only(folder: Path):
    """A command-line runner for which ``folder`` is on read-only media: as root (whom file
    permissions do not stop), a read-only bind mount of the folder onto itself, in a mount
    namespace of the command's own; as another user, the folder and its files without write
    permission (restored after)."""
    if os.geteuid() != 0:
        modes = {p: p.stat().st_mode for p in [folder, *folder.iterdir()]}
        for p in modes:
            p.chmod(0o555 if p.is_dir() else 0o444)
        try:
            yield run_cli
        finally:
            for p, mode in modes.items():
                p.chmod(mode)
        return
    if shutil.which("unshare") is None:
        pytest.fail("unshare (util-linux) is needed to mount a folder read-only as root")

    def run(*args: str) -> subprocess.CompletedProcess:
        script = 'mount --bind -o ro "$0" "$0" && cd "$1" && shift && exec "$@"'
        return subprocess.run(
            ["unshare", "-m", "sh", "-c", script, str(folder), str(ROOT), PY, "-m", "harness.cli", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )

    yield run


def test_an_older_store_on_read_only_media_is_listed_and_a_write_is_one_line(tmp_path):
    media = tmp_path / "media"
    media.mkdir()
    old = old_store(media / "triage.sqlite")
    before = old.read_bytes()
    with _read_only(media) as run:
        listed = run("triage", "--store", str(old))
        assert listed.returncode == 0, listed.stderr
        assert "sig-old" in listed.stdout and "1 root causes" in listed.stdout
        line = one_line(run("triage", "--store", str(old), "--set", "sig-old", "known"))
        assert str(old) in line and "read-only" in line, line
    assert old.read_bytes() == before


def test_a_read_only_store_is_one_line_when_written(tmp_path):
    media = tmp_path / "media"
    media.mkdir()
    store = new_store(media / "triage.sqlite")
    before = store.read_bytes()
    with _read_only(media) as run:
        line = one_line(run("triage", "--store", str(store), "--set", "sig-a", "wontfix"))
        assert "read-only" in line and str(store) in line, line
        listed = run("triage", "--store", str(store))
        assert listed.returncode == 0 and "2 root causes" in listed.stdout, listed.stderr
    assert store.read_bytes() == before


@contextmanager
def _locked(path: Path, how: str):
    """Another process holding a real SQLite lock on ``path`` (``BEGIN EXCLUSIVE``: no reader
    either; ``BEGIN IMMEDIATE``: no other writer) until the block ends."""
    holder = subprocess.Popen(
        [
            PY,
            "-c",
            "import sqlite3, sys; db = sqlite3.connect(sys.argv[1], isolation_level=None); "
            f"db.execute('BEGIN {how}'); db.execute(\"UPDATE causes SET sentence = sentence\"); "
            "print('locked', flush=True); sys.stdin.read()",
            str(path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        yield
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)


def test_a_locked_store_is_said_to_be_busy_not_foreign(tmp_path):
    store = new_store(tmp_path / "triage.sqlite")
    with _locked(store, "EXCLUSIVE"):
        line = one_line(run_cli("triage", "--store", str(store)))
        assert "busy" in line and "locked" in line and "not a triage store" not in line, line
    with _locked(store, "IMMEDIATE"):
        line = one_line(run_cli("triage", "--store", str(store), "--set", "sig-a", "wontfix"))
        assert "busy" in line and "not a triage store" not in line, line
    listed = run_cli("triage", "--store", str(store))
    assert listed.returncode == 0 and "wontfix" not in listed.stdout


# ---- a run folder beside a damaged store; damaged triage.json and campaign.json (fault 9) -------


def _campaign(tmp_path: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return run_cli(
        "fuzz",
        "--targets",
        "candle",
        "--max-programs",
        "24",
        "--seed",
        "1",
        "--profile",
        "quick",
        "--shrink-time",
        "5",
        "--confirm",
        "1",
        "--out",
        str(out),
        *extra,
        env=fake_probe_dir(tmp_path),
    )


def _damaged_store(path: Path) -> Path:
    new_store(path)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE sightings SET versions = '{not json' WHERE cause = 'sig-b'")
    db.close()
    return path


def test_a_damaged_store_beside_a_run_folder_does_not_stop_its_report(tmp_path):
    reports = tmp_path / "reports"
    reports.mkdir()
    store = _damaged_store(reports / "triage.sqlite")
    r = _campaign(tmp_path, reports / "run1")
    assert r.returncode in (0, 1) and "internal error" not in r.stderr, r.stdout + r.stderr
    assert (reports / "run1" / "report.md").is_file() and (reports / "run1" / "report.html").is_file()
    assert (reports / "run1" / "triage.json").is_file()  # the run was recorded all the same
    assert str((reports / "run1").resolve()) in {r for (r,) in sqlite3.connect(store).execute("SELECT run FROM runs")}


def test_a_report_drawn_beside_a_damaged_store_warns_in_one_line(tmp_path):
    # The run recorded elsewhere, so its report reads the store beside it, which is damaged.
    reports = tmp_path / "reports"
    r = _campaign(tmp_path, reports / "run1", "--triage", str(tmp_path / "elsewhere.sqlite"), "--no-report")
    assert r.returncode in (0, 1), r.stdout + r.stderr
    (reports / "run1" / "triage.json").unlink()
    _damaged_store(reports / "triage.sqlite")
    out = run_cli("report", str(reports / "run1"))
    assert out.returncode == 0 and "internal error" not in out.stderr, out.stdout + out.stderr
    warnings = [line for line in out.stderr.splitlines() if "triage.sqlite" in line]
    assert len(warnings) == 1 and "damaged" in warnings[0], out.stderr
    assert (reports / "run1" / "report.md").is_file()


@pytest.mark.parametrize(
    "edit,named",
    [
        (lambda doc: doc.update(previous_run=5), "previous_run"),
        (lambda doc: doc.update(first_seen="sig-a"), "first_seen"),
    ],
)
def test_a_damaged_triage_json_is_one_line_naming_the_file_and_field(tmp_path, edit, named):
    run = tmp_path / "reports" / "run1"
    r = _campaign(tmp_path, run, "--no-report")
    assert r.returncode in (0, 1), r.stdout + r.stderr
    doc = json.loads((run / "triage.json").read_text())
    edit(doc)
    (run / "triage.json").write_text(json.dumps(doc))
    line = one_line(run_cli("report", str(run)))
    assert "triage.json" in line and named in line, line


def test_a_campaign_json_started_no_calendar_can_show_is_one_line(tmp_path):
    run = tmp_path / "reports" / "run1"
    r = _campaign(tmp_path, run, "--no-report")
    assert r.returncode in (0, 1), r.stdout + r.stderr
    store = tmp_path / "reports" / "triage.sqlite"
    before = store.read_bytes()
    state = json.loads((run / "campaign.json").read_text())
    state["started"] = 1e20
    (run / "campaign.json").write_text(json.dumps(state))
    for args in (["triage", "--record", str(run)], ["report", str(run)]):
        line = one_line(run_cli(*args))
        assert "campaign.json" in line and "started" in line, line
    assert store.read_bytes() == before
