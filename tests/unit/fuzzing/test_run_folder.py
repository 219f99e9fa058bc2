"""The run folder and the corpus under misuse and damage: real files, real processes, a real
``redis-server``.

Each defect gets a test at the level of ``harness.fuzzing.run_folder`` / ``harness.fuzzing.corpus`` (what these
modules promise), and, where ``aliasfuzz fuzz`` already goes through them, through the real
command line: exit status 2, one line ``aliasfuzz: <file>: <what is wrong>``, no traceback,
nothing already written changed.

The tests here run in this process (the command line through ``run_cli_in_process``), as the
unit tier requires; those that need real processes are in tests/e2e/test_run_folder.py.
"""

from __future__ import annotations

import json
import os
import typing
from pathlib import Path

import pytest

import harness.fuzzing.run_folder as run_folder_mod
from harness.errors import CampaignError, InputError
from harness.fuzzing.campaign import CampaignConfig
from harness.fuzzing.corpus import open_database
from harness.fuzzing.run_folder import RunFolder
from tests.conftest import CASES, free_port, run_cli_in_process
from tests.support.fake_targets import fake_probe_dir
from tests.support.run_folders import one_line_error, run_folder_with, snapshot, state

CASE = (CASES / "example_sgd_snapshots.toml").read_text()


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
    r = run_cli_in_process(
        "fuzz", "--resume", str(out), "--max-programs", "8", "--no-report", env=fake_probe_dir(tmp_path)
    )
    one_line_error(r, str(out / "campaign.json"), fragment)
    assert snapshot(out) == before


def test_resume_on_a_plain_file_a_missing_folder_or_a_campaign_json_folder(tmp_path):
    env = fake_probe_dir(tmp_path)
    plain = tmp_path / "plain"
    plain.write_text("not a run folder\n")
    one_line_error(run_cli_in_process("fuzz", "--resume", str(plain), "--no-report", env=env), f"{plain}: not a folder")
    assert plain.read_text() == "not a run folder\n"
    one_line_error(
        run_cli_in_process("fuzz", "--resume", str(tmp_path / "nope"), "--no-report", env=env), "no such run folder"
    )
    assert not (tmp_path / "nope").exists()
    out = tmp_path / "run"
    (out / "campaign.json").mkdir(parents=True)
    one_line_error(
        run_cli_in_process("fuzz", "--resume", str(out), "--no-report", env=env),
        f"{out / 'campaign.json'}: is a folder",
    )
    (out / "campaign.json").rmdir()
    os.mkfifo(out / "campaign.json")  # reading it would wait for a writer forever
    one_line_error(
        run_cli_in_process("fuzz", "--resume", str(out), "--no-report", env=env, timeout=120),
        f"{out / 'campaign.json'}: cannot read: not a regular file",
    )
    (out / "campaign.json").unlink()
    (out / "campaign.json").write_bytes(b"\xff\xfe{}")
    one_line_error(run_cli_in_process("fuzz", "--resume", str(out), "--no-report", env=env), "not UTF-8")
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
    r = run_cli_in_process(
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


def test_a_redis_password_is_not_printed(tmp_path):
    port = free_port()
    with pytest.raises(CampaignError) as info:
        open_database(f"redis://user:s3cret@127.0.0.1:{port}/0", RunFolder(tmp_path / "run"))
    assert "s3cret" not in str(info.value) and f"redis://user:***@127.0.0.1:{port}/0" in str(info.value)
