"""The run folder and the corpus under misuse and damage: real files, real processes, a real
``redis-server``.

Each defect gets a test at the level of ``harness.fuzzing.run_folder`` / ``harness.fuzzing.corpus`` (what these
modules promise), and, where ``aliasfuzz fuzz`` already goes through them, through the real
command line: exit status 2, one line ``aliasfuzz: <file>: <what is wrong>``, no traceback,
nothing already written changed.

The tests of this subject that run in-process are in tests/unit/fuzzing/test_run_folder.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

import harness.fuzzing.corpus as corpus_mod
from harness.errors import CampaignError
from harness.fuzzing.corpus import load_corpus, open_database, store_corpus
from harness.fuzzing.run_folder import RunFolder
from tests.conftest import CASES, PY, ROOT, run_cli
from tests.support.fake_targets import fake_probe_dir
from tests.support.run_folders import holder, one_line_error, snapshot, state

CASE = (CASES / "example_sgd_snapshots.toml").read_text()


# == 1. one campaign at a time ===================================================================


def test_a_folder_locked_by_another_process_is_refused_until_that_process_dies(tmp_path):
    out = tmp_path / "run"
    other = holder(out, "create_new")
    try:
        with pytest.raises(CampaignError) as info:
            RunFolder(out).acquire()
        assert str(info.value) == f"{out}: in use by another campaign (pid {other.pid})"
        with pytest.raises(CampaignError, match=rf"in use by another campaign \(pid {other.pid}\)"):
            RunFolder.create_new(out)
        RunFolder(out).save_state(state(out))  # (written behind the lock's back, to be resumable)
        with pytest.raises(CampaignError, match=rf"in use by another campaign \(pid {other.pid}\)"):
            RunFolder.open_existing(out)
        assert (out / "campaign.json").exists() and (out / "campaign.lock").exists()  # nothing removed
    finally:
        other.kill()  # SIGKILL: no clean-up runs; the kernel drops the lock
        other.wait(timeout=10)
    with RunFolder.open_existing(out) as folder:
        assert folder.locked
        # the same process, another descriptor: still one holder at a time
        with pytest.raises(CampaignError, match=rf"pid {os.getpid()}\)"):
            RunFolder(out).acquire()
        with folder.lock():  # re-entrant on the object that holds it
            pass
        assert folder.locked
    assert not folder.locked
    RunFolder(out).acquire()


def test_child_processes_of_a_campaign_do_not_inherit_the_lock(tmp_path):
    folder = RunFolder.create_new(tmp_path / "run")
    child = subprocess.Popen(["sleep", "30"])  # a probe the campaign started, outliving it
    try:
        folder.release()
        RunFolder(folder.path).acquire()  # free although the child still runs
    finally:
        child.kill()
        child.wait()


def test_two_campaigns_on_one_out_the_second_is_refused(tmp_path):
    env = {**os.environ, **fake_probe_dir(tmp_path, "--slow-ms", "20")}
    out = tmp_path / "run"
    first = subprocess.Popen(
        [
            PY,
            "-m",
            "harness.cli",
            "fuzz",
            "--targets",
            "candle",
            "--profile",
            "quick",
            "--seed",
            "7",
            "--max-programs",
            "100000",
            "--chunk-size",
            "8",
            "--shrink-time",
            "5",
            "--out",
            str(out),
            "--no-report",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (out / "campaign.json").exists() and time.monotonic() < deadline and first.poll() is None:
            time.sleep(0.1)
        assert first.poll() is None and (out / "campaign.json").exists()
        for args in (
            ["--out", str(out), "--max-programs", "8", "--seed", "8", "--targets", "candle"],
            ["--resume", str(out), "--max-programs", "8"],
        ):
            r = run_cli("fuzz", *args, "--no-report", env=fake_probe_dir(tmp_path))
            one_line_error(r, f"{out}: in use by another campaign (pid {first.pid})")
            assert first.poll() is None
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    r = run_cli("fuzz", "--resume", str(out), "--max-programs", "8", "--no-report", env=fake_probe_dir(tmp_path))
    assert r.returncode in (0, 1), r.stdout + r.stderr  # a killed holder leaves no lock behind


def test_cli_refuses_an_out_that_holds_a_run_or_the_users_files_and_cleans_up_a_failed_set_up(tmp_path):
    env = fake_probe_dir(tmp_path)
    args = ["--targets", "candle:ref", "--max-programs", "8", "--seed", "1", "--profile", "quick"]
    zero = tmp_path / "zero"
    r = run_cli("fuzz", *args, "--out", str(zero), "--no-report", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads((zero / "findings.json").read_text()) == []
    before = snapshot(zero)
    one_line_error(run_cli("fuzz", *args, "--out", str(zero), env=env), f"{zero}: already holds a campaign")
    assert snapshot(zero) == before
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "report.md").write_text("my notes\n")
    one_line_error(run_cli("fuzz", *args, "--out", str(mine), env=env), "not empty and not an aliasfuzz run folder")
    assert snapshot(mine) == {"report.md": b"my notes\n"}
    blocker = tmp_path / "db-file"
    blocker.write_text("x")
    new = tmp_path / "new"
    one_line_error(run_cli("fuzz", *args, "--db", str(blocker), "--out", str(new), env=env), f"--db {blocker}")
    assert not new.exists()


def test_resume_after_the_journal_was_deleted_keeps_every_finding(tmp_path):
    env = fake_probe_dir(tmp_path)
    out = tmp_path / "run"
    r = run_cli(
        "fuzz",
        "--targets",
        "candle",
        "--max-programs",
        "256",
        "--seed",
        "1",
        "--profile",
        "quick",
        "--shrink-time",
        "5",
        "--out",
        str(out),
        "--no-report",
        env=env,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    before = json.loads((out / "findings.json").read_text())
    assert len(before) >= 2
    (out / "findings.jsonl").unlink()
    r = run_cli("fuzz", "--resume", str(out), "--max-programs", "8", "--no-report", env=env)
    assert r.returncode in (0, 1), r.stdout + r.stderr
    assert f"restored {len(before)} finding(s)" in r.stdout
    after = json.loads((out / "findings.json").read_text())
    assert after[: len(before)] == before
    assert [json.loads(line)["signature"] for line in (out / "findings.jsonl").read_text().splitlines()] == [
        f["signature"] for f in after
    ]


# == 5. corpus saves that fail ===================================================================


def test_a_redis_server_killed_mid_campaign_is_counted_never_silent(tmp_path, redis_server):
    url, proc = redis_server
    corpus = open_database(url, RunFolder(tmp_path / "run"))
    assert isinstance(corpus, corpus_mod.Corpus)
    assert corpus.store(CASE, CASE) is True and corpus.failures == 0 and len(load_corpus(corpus)) == 1
    proc.kill()  # SIGKILL, mid-campaign
    proc.wait(timeout=10)
    started = time.monotonic()
    assert corpus.store(CASE) is False
    assert store_corpus(corpus, CASE, CASE) is not None
    assert time.monotonic() - started < 30  # a dead server does not stall the campaign
    assert corpus.failures == 3 and corpus.stored == 2
    assert corpus.first_error.startswith(f"--db {url}: cannot store a program in the corpus (")
    assert "ConnectionError" in corpus.last_error and "\n" not in corpus.last_error
    assert corpus.summary().startswith(f"--db {url}: 3 of 5 corpus entries not stored (last error: ")
    with pytest.raises(CampaignError, match=rf"--db {url}: cannot read the corpus"):
        load_corpus(corpus)
    with pytest.raises(CampaignError, match="cannot reach Redis"):
        open_database(url, RunFolder(tmp_path / "run"))


def test_db_that_is_a_regular_file_is_refused_at_start(tmp_path):
    blocker = tmp_path / "db-file"
    blocker.write_text("x")
    with pytest.raises(CampaignError) as info:
        open_database(str(blocker), RunFolder(tmp_path / "run"))
    assert str(info.value) == f"--db {blocker}: not a folder (give --db a folder or redis://host:port/n)"
    with pytest.raises(CampaignError, match=rf"--db {blocker / 'sub'}: cannot create the corpus folder"):
        open_database(str(blocker / "sub"), RunFolder(tmp_path / "run"))
    r = run_cli(
        "fuzz",
        "--targets",
        "candle",
        "--max-programs",
        "8",
        "--db",
        str(blocker),
        "--out",
        str(tmp_path / "out"),
        "--no-report",
        env=fake_probe_dir(tmp_path),
    )
    one_line_error(r, f"--db {blocker}: not a folder")
    assert blocker.read_text() == "x"


def _read_only(path: Path, request) -> None:
    """Makes ``path`` (a new folder) read-only for this process, root included."""
    path.mkdir()
    if os.geteuid() != 0:
        path.chmod(0o555)
        request.addfinalizer(lambda: path.chmod(0o755))
        return
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(path)], capture_output=True, text=True
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here ({r.stderr.strip()})")
    request.addfinalizer(lambda: subprocess.run(["umount", str(path)], check=False))


def test_a_read_only_db_folder_is_refused_at_start(tmp_path, request):
    ro = tmp_path / "ro"
    _read_only(ro, request)
    with pytest.raises(CampaignError) as info:
        open_database(str(ro), RunFolder(tmp_path / "run"))
    assert str(info.value).startswith(f"--db {ro}: cannot write the corpus (")
    r = run_cli(
        "fuzz",
        "--targets",
        "candle",
        "--max-programs",
        "8",
        "--db",
        str(ro),
        "--out",
        str(tmp_path / "out"),
        "--no-report",
        env=fake_probe_dir(tmp_path),
    )
    one_line_error(r, f"--db {ro}: cannot write the corpus")


def test_a_db_folder_that_becomes_read_only_is_counted(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root (mount)")
    mnt = tmp_path / "db"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip()})")
    try:
        corpus = open_database(str(mnt), RunFolder(tmp_path / "run"))
        assert corpus.store(CASE) and len(load_corpus(corpus)) == 1
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        other = CASE.replace("0.5", "0.25") if "0.5" in CASE else CASE + "\n# another\n"
        assert corpus.store(other) is False and corpus.failures == 1
        assert "Read-only file system" in corpus.last_error and corpus.last_error.startswith(f"--db {mnt}: ")
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_cli_says_when_corpus_saves_fail(tmp_path, redis_server):
    url, proc = redis_server
    env = {**os.environ, **fake_probe_dir(tmp_path, "--slow-ms", "20")}
    out = tmp_path / "run"
    campaign = subprocess.Popen(
        [
            PY,
            "-m",
            "harness.cli",
            "fuzz",
            "--targets",
            "candle",
            "--profile",
            "quick",
            "--seed",
            "7",
            "--max-programs",
            "256",
            "--chunk-size",
            "8",
            "--shrink-time",
            "2",
            "--db",
            url,
            "--out",
            str(out),
            "--no-report",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not (out / "campaign.json").exists() and time.monotonic() < deadline and campaign.poll() is None:
        time.sleep(0.05)
    proc.kill()  # before the first finding is stored
    stdout, stderr = campaign.communicate(timeout=600)
    assert campaign.returncode == 1, stdout + stderr
    assert "Traceback" not in stderr
    new = [f for f in json.loads((out / "findings.json").read_text()) if f["status"] == "new"]
    text = stdout + stderr
    assert f"--db {url}: cannot store a program in the corpus" in text
    m = re.search(rf"--db {re.escape(url)}: (\d+) of (\d+) corpus entries not stored \(last error: ", text)
    assert m, text[-3000:]
    assert int(m.group(2)) == 2 * len(new) and int(m.group(1)) >= 2  # (a first one may beat the kill)


def test_a_malformed_db_url_on_the_command_line(tmp_path):
    r = run_cli(
        "fuzz",
        "--targets",
        "candle",
        "--max-programs",
        "8",
        "--db",
        "redis://:::/x",
        "--out",
        str(tmp_path / "out"),
        "--no-report",
        env=fake_probe_dir(tmp_path),
    )
    one_line_error(r, "--db redis://:::/x: not a valid Redis URL")
