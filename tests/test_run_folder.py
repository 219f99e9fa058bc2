"""The run folder and the corpus under misuse and damage: real files, real processes, a real
``redis-server``.

Each defect gets a test at the level of ``harness.fuzzing.run_folder`` / ``harness.fuzzing.corpus`` (what these
modules promise), and, where ``aliasfuzz fuzz`` already goes through them, through the real
command line: exit status 2, one line ``aliasfuzz: <file>: <what is wrong>``, no traceback,
nothing already written changed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import typing
from pathlib import Path

import pytest

import harness.fuzzing.corpus as corpus_mod
import harness.fuzzing.run_folder as run_folder_mod
from harness.errors import CampaignError, InputError
from harness.fuzzing.campaign import CampaignConfig
from harness.fuzzing.corpus import load_corpus, open_database, store_corpus
from harness.fuzzing.run_folder import RunFolder
from tests.conftest import CASES, PY, ROOT, free_port, run_cli
from tests.support.fake_targets import fake_probe_dir
from tests.support.run_folders import holder, one_line_error, run_folder_with, snapshot, state

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


# == 2. a damaged run folder on --resume =========================================================

DAMAGED_STATES = {
    "list": ([], "not a campaign state"),
    "empty_object": ({}, "config: missing"),
    "unknown_key": ({"__extra__": 1}, "unknown key '__extra__'"),
    "negative_next_chunk": ({"next_chunk": -1}, "next_chunk: must be a non-negative integer"),
    "string_next_chunk": ({"next_chunk": "3"}, "next_chunk: must be a non-negative integer"),
    "bool_programs": ({"programs": True}, "programs: must be a non-negative integer"),
    "runs_null": ({"runs": None}, "runs: must be a list of objects"),
    "runs_of_numbers": ({"runs": [1]}, "runs: must be a list of objects"),
    "config_list": ({"config": []}, "config: must be an object"),
    "elapsed_string": ({"elapsed_s": "1s"}, "elapsed_s: must be a non-negative number"),
    "targets_list": ({"targets": []}, "targets: must be an object"),
    "unavailable_null": ({"unavailable": None}, "unavailable: must be an object"),
}


def _damaged(tmp_path: Path, name: str) -> tuple[Path, str]:
    out = tmp_path / "run"
    out.mkdir()
    change, fragment = DAMAGED_STATES[name]
    doc = change if not isinstance(change, dict) or name == "empty_object" else state(out, **change)
    (out / "campaign.json").write_text(json.dumps(doc))
    return out, fragment


@pytest.mark.parametrize("name", sorted(DAMAGED_STATES))
def test_load_state_names_the_key_that_is_wrong(tmp_path, name):
    out, fragment = _damaged(tmp_path, name)
    with pytest.raises(CampaignError) as info:
        RunFolder(out).load_state()
    assert str(info.value).startswith(f"{out / 'campaign.json'}: ") and fragment in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("name", ["list", "empty_object", "unknown_key", "negative_next_chunk", "runs_null"])
def test_resume_on_a_damaged_campaign_json_is_one_line(tmp_path, name):
    out, fragment = _damaged(tmp_path, name)
    before = snapshot(out)
    r = run_cli("fuzz", "--resume", str(out), "--max-programs", "8", "--no-report", env=fake_probe_dir(tmp_path))
    one_line_error(r, str(out / "campaign.json"), fragment)
    assert snapshot(out) == before


def test_resume_on_a_plain_file_a_missing_folder_or_a_campaign_json_folder(tmp_path):
    env = fake_probe_dir(tmp_path)
    plain = tmp_path / "plain"
    plain.write_text("not a run folder\n")
    one_line_error(run_cli("fuzz", "--resume", str(plain), "--no-report", env=env), f"{plain}: not a folder")
    assert plain.read_text() == "not a run folder\n"
    one_line_error(run_cli("fuzz", "--resume", str(tmp_path / "nope"), "--no-report", env=env), "no such run folder")
    assert not (tmp_path / "nope").exists()
    out = tmp_path / "run"
    (out / "campaign.json").mkdir(parents=True)
    one_line_error(
        run_cli("fuzz", "--resume", str(out), "--no-report", env=env), f"{out / 'campaign.json'}: is a folder"
    )
    (out / "campaign.json").rmdir()
    os.mkfifo(out / "campaign.json")  # reading it would wait for a writer forever
    one_line_error(
        run_cli("fuzz", "--resume", str(out), "--no-report", env=env, timeout=120),
        f"{out / 'campaign.json'}: cannot read: not a regular file",
    )
    (out / "campaign.json").unlink()
    (out / "campaign.json").write_bytes(b"\xff\xfe{}")
    one_line_error(run_cli("fuzz", "--resume", str(out), "--no-report", env=env), "not UTF-8")
    (out / "campaign.json").write_text(json.dumps(state(out)))
    os.mkfifo(out / "findings.jsonl")
    with pytest.raises(CampaignError, match="findings.jsonl: cannot read: not a regular file"):
        RunFolder(out).load_findings()


BAD_JOURNAL_LINES = {
    "integer": (b"42\n", "not a finding (a JSON object)"),
    "no_signature": (b'{"kind": "device"}\n', "no signature"),
    "signature_not_a_string": (b'{"signature": 7}\n', "signature: must be a non-empty string"),
    "binary": (bytes(b for b in range(256) if b != 10) + b"\n", "not UTF-8"),
    "torn_in_the_middle": (b'{"signature": "torn\n', "not JSON"),
    "status_not_a_string": (b'{"signature": "x", "status": 1}\n', "status: must be a string"),
}


def _journal_with(tmp_path: Path, bad: bytes) -> RunFolder:
    folder = run_folder_with(tmp_path, 2)
    lines = folder.journal.read_bytes().splitlines(keepends=True)
    folder.journal.write_bytes(lines[0] + bad + lines[1])  # the bad line is line 2
    return folder


@pytest.mark.parametrize("name", sorted(BAD_JOURNAL_LINES))
def test_a_bad_journal_line_is_named_by_its_number(tmp_path, name):
    bad, why = BAD_JOURNAL_LINES[name]
    folder = _journal_with(tmp_path, bad)
    with pytest.raises(CampaignError) as info:
        folder.load_findings()
    assert str(info.value).startswith(f"{folder.journal}:2: ") and why in str(info.value)


@pytest.mark.parametrize("name", ["integer", "no_signature", "binary"])
def test_resume_on_a_bad_journal_line_is_one_line_and_writes_nothing(tmp_path, name):
    bad, why = BAD_JOURNAL_LINES[name]
    folder = _journal_with(tmp_path, bad)
    before = snapshot(folder.path)
    r = run_cli(
        "fuzz", "--resume", str(folder.path), "--max-programs", "8", "--no-report", env=fake_probe_dir(tmp_path)
    )
    one_line_error(r, f"{folder.journal}:2: ", why)
    assert snapshot(folder.path) == before


def test_only_a_torn_last_line_is_tolerated_and_it_is_kept_aside(tmp_path):
    folder = run_folder_with(tmp_path, 2)
    with open(folder.journal, "ab") as f:
        f.write(b'{"kind": "device", "signature": "half-writ')  # a kill mid-write
    assert [r["signature"] for r in folder.load_findings()] == ["sig-00", "sig-01"]
    records = folder.load_findings()
    folder.add_finding({"signature": "after", "status": "new"}, "#\n", "#\n", None, records)
    assert [r["signature"] for r in folder.load_findings()] == ["sig-00", "sig-01", "after"]
    assert all(json.loads(line) for line in folder.journal.read_text().splitlines())  # no torn line inside
    assert folder.torn_file.read_bytes() == b'{"kind": "device", "signature": "half-writ\n'  # nothing lost
    # A last line that is whole but lost its newline is a finding, and keeps its line.
    with open(folder.journal, "ab") as f:
        f.write(b'{"signature": "no-newline"}')
    assert folder.load_findings()[-1]["signature"] == "no-newline"
    records = folder.load_findings()
    folder.add_finding({"signature": "next"}, "#\n", "#\n", None, records)
    assert [r["signature"] for r in folder.load_findings()][-2:] == ["no-newline", "next"]


def test_saved_config_keys_are_checked_against_the_config_class(tmp_path):
    fields = typing.get_type_hints(CampaignConfig)
    good = state(tmp_path)["config"]
    assert run_folder_mod.check_config_keys(dict(good), fields) == good
    for change, fragment in (
        ({"bogus": 1}, "config.bogus: unknown key"),
        ({"seed": "7"}, "config.seed: must be an integer"),
        ({"workers": 1.5}, "config.workers: must be an integer"),
        ({"targets": "candle"}, "config.targets: must be a list of a string or null"),
        ({"shrink_known": 1}, "config.shrink_known: must be true or false"),
    ):
        with pytest.raises(CampaignError, match=fragment):
            run_folder_mod.check_config_keys({**good, **change}, fields, where="campaign.json")
    with pytest.raises(CampaignError, match="config.seed: missing"):
        run_folder_mod.check_config_keys(
            {k: v for k, v in good.items() if k != "seed"}, fields, required=("out", "seed")
        )
    assert run_folder_mod.check_config_keys({**good, "budget_s": 600}, fields)["budget_s"] == 600  # an int is a number
    out = tmp_path / "run"
    out.mkdir()
    (out / "campaign.json").write_text(json.dumps(state(out, config={**good, "bogus": 1})))
    with pytest.raises(CampaignError, match=r"campaign.json: config.bogus: unknown key"):
        RunFolder(out).load_state(config_fields=fields)
    assert run_folder_mod.check_state(state(out), "x")["next_chunk"] == 0


# == 3. what a new campaign may take as its --out ================================================


def test_a_finished_run_without_findings_is_never_taken_by_a_new_campaign(tmp_path):
    folder = run_folder_with(tmp_path, 0)
    folder.findings_json.write_text("[]")
    before = snapshot(folder.path)
    with pytest.raises(CampaignError, match=rf"{folder.path}: already holds a campaign: use --resume"):
        RunFolder.create_new(folder.path)
    assert snapshot(folder.path) == before  # no lock file either: nothing written


def test_a_users_folder_that_is_not_a_run_folder_is_refused(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "report.md").write_text("my notes\n")
    before = snapshot(mine)
    with pytest.raises(CampaignError) as info:
        RunFolder.create_new(mine)
    assert str(info.value).startswith(f"{mine}: not empty and not an aliasfuzz run folder")
    assert snapshot(mine) == before
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(CampaignError, match="not a folder"):
        RunFolder.create_new(blocker)
    with pytest.raises(CampaignError, match="cannot write the run folder"):
        RunFolder.create_new(blocker / "run")
    assert blocker.read_text() == "x"


def test_a_failed_set_up_removes_only_what_it_created(tmp_path):
    not_a_folder = tmp_path / "db-file"
    not_a_folder.write_text("x")
    # A new folder (and its new parents): gone again after a set-up failure.
    out = tmp_path / "reports" / "nightly" / "run"
    with pytest.raises(CampaignError, match="--db"):
        with RunFolder.create_new(out) as folder:
            folder.save_state(state(out))
            open_database(str(not_a_folder), folder)
    assert not (tmp_path / "reports").exists()
    # A folder that was there (empty): it stays, empty again.
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CampaignError):
        with RunFolder.create_new(empty) as folder:
            folder.save_state(state(empty))
            open_database(None, folder)
            raise CampaignError("targets: none available")
    assert empty.is_dir() and list(empty.iterdir()) == []
    # ... and so does an empty folder of the layout in it (a set-up killed before it wrote anything).
    (empty / "corpus").mkdir()
    with pytest.raises(CampaignError):
        with RunFolder.create_new(empty) as folder:
            corpus = open_database(None, folder)
            corpus.store(CASE)
            raise CampaignError("targets: none available")
    assert [p.name for p in empty.iterdir()] == ["corpus"] and list((empty / "corpus").iterdir()) == []
    # A parent another run writes into meanwhile stays with that run in it.
    shared = tmp_path / "shared"
    with pytest.raises(CampaignError):
        with RunFolder.create_new(shared / "a") as folder:
            run_folder_with(shared, 1, name="b")
            raise CampaignError("boom")
    assert not (shared / "a").exists() and (shared / "b" / "findings.jsonl").exists()
    # Anything of value makes it a run folder that stays: a finding, or programs run.
    for name, write in (
        ("finding", lambda f: f.add_finding({"signature": "s"}, "#\n", "#\n", None, [])),
        ("programs", lambda f: f.save_state(state(f.path, programs=64))),
    ):
        out = tmp_path / f"kept-{name}"
        with pytest.raises(CampaignError):
            with RunFolder.create_new(out) as folder:
                write(folder)
                raise CampaignError("disk full")
        assert (out / "cases").is_dir() and not folder.locked


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


# == 4. resuming after the journal was lost ======================================================


def test_reconcile_restores_findings_the_journal_lost(tmp_path):
    folder = run_folder_with(tmp_path, 23)
    listed = json.loads(folder.findings_json.read_text())
    folder.journal.unlink()  # deleted
    records, messages = folder.reconcile()
    assert [r["signature"] for r in records] == [r["signature"] for r in listed]
    assert folder.load_findings() == listed == json.loads(folder.findings_json.read_text())
    assert len(messages) == 1 and "restored 23 finding(s)" in messages[0] and str(folder.journal) in messages[0]
    # cut short (17 of 23 lines): the 6 missing are appended, the 17 left as they were
    lines = folder.journal.read_bytes().splitlines(keepends=True)
    folder.journal.write_bytes(b"".join(lines[:17]))
    records, messages = folder.reconcile()
    assert len(records) == 23 and folder.journal.read_bytes().splitlines(keepends=True)[:17] == lines[:17]
    assert folder.load_findings() == listed and "restored 6 finding(s)" in messages[0]
    # the next finding is number 24, in a file of its own
    folder.add_finding({"signature": "sig-new"}, "#\n", "#\n", None, records)
    assert records[-1]["case"].startswith("cases/024-") and len(folder.load_findings()) == 24


def test_reconcile_rewrites_a_lagging_findings_json_and_refuses_a_contradiction(tmp_path):
    folder = run_folder_with(tmp_path, 5)
    listed = json.loads(folder.findings_json.read_text())
    folder.findings_json.write_text(json.dumps(listed[:4]))  # a kill between the journal and the list
    records, messages = folder.reconcile()
    assert messages == [] and json.loads(folder.findings_json.read_text()) == listed == records
    folder.findings_json.write_text(
        json.dumps(
            [listed[0], {**listed[1], "signature": "other"}]
            + listed[2:]
            + [{"signature": "only-in-the-list", "status": "new", "kind": "device"}]
        )
    )
    before = snapshot(folder.path)
    with pytest.raises(CampaignError) as info:
        folder.reconcile()
    message = str(info.value)
    assert "\n" not in message and "finding 2" in message and "findings.jsonl:2" in message and "contradicts" in message
    assert snapshot(folder.path) == before
    for bad, fragment in (("{}", "not a list of findings"), ("[1]", "finding 1: not a finding"), ("[", "unreadable")):
        folder.findings_json.write_text(bad)
        with pytest.raises(CampaignError, match=fragment):
            folder.reconcile()
        assert folder.findings_json.read_text() == bad  # never rewritten over what it cannot read
    # what a resumed campaign reads of each finding must be there
    folder.findings_json.write_text(json.dumps(listed))
    with open(folder.journal, "ab") as f:
        f.write(b'{"signature": "x", "kind": "device"}\n')
    with pytest.raises(CampaignError, match=r"findings.jsonl:6: status: missing"):
        folder.reconcile()


def test_reconcile_after_a_torn_line_keeps_one_finding_per_line(tmp_path):
    folder = run_folder_with(tmp_path, 4)
    lines = folder.journal.read_bytes().splitlines(keepends=True)
    folder.journal.write_bytes(b"".join(lines[:2]) + lines[2][:30])  # line 3 torn, line 4 gone
    records, messages = folder.reconcile()
    assert len(records) == 4 and folder.load_findings() == json.loads(folder.findings_json.read_text())
    assert folder.torn_file.read_bytes() == lines[2][:30] + b"\n"


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


# == 6. a malformed --db URL =====================================================================


@pytest.mark.parametrize(
    "spec,fragment",
    [
        ("redis://:::/x", "not a valid Redis URL"),
        ("redis://localhost:99999/0", "not a valid Redis URL"),
        ("redis://localhost:6379/abc", "database 'abc' is not a number"),
        ("redis:///0", "no host"),
        ("http://localhost/0", "unknown URL scheme http://"),
    ],
)
def test_a_malformed_db_url_is_one_line(tmp_path, spec, fragment):
    with pytest.raises(InputError) as info:
        open_database(spec, RunFolder(tmp_path / "run"))
    assert str(info.value).startswith(f"--db {spec}: ") and fragment in str(info.value)
    assert not (tmp_path / "run").exists()


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


def test_a_redis_password_is_not_printed(tmp_path):
    port = free_port()
    with pytest.raises(CampaignError) as info:
        open_database(f"redis://user:s3cret@127.0.0.1:{port}/0", RunFolder(tmp_path / "run"))
    assert "s3cret" not in str(info.value) and f"redis://user:***@127.0.0.1:{port}/0" in str(info.value)
