"""``RunFolder.open_read_only``: how the reports and the history page read a run folder, without
its lock (a campaign may be running in it) and without writing anything.

The tests here run in this process, as the
unit tier requires; those that need real processes are in tests/e2e/test_run_folder_read_only.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.errors import CampaignError
from harness.fuzzing.run_folder import RunFolder
from tests.support.run_folders import run_folder_with


def test_read_findings_takes_the_journal_or_a_longer_list(tmp_path):
    folder = run_folder_with(tmp_path, 4)
    listed = json.loads(folder.findings_json.read_text())
    lines = folder.journal.read_bytes().splitlines(keepends=True)
    folder.journal.write_bytes(b"".join(lines[:2]))  # cut short: findings.json holds more
    assert RunFolder.open_read_only(folder.path).read_findings() == listed
    folder.findings_json.write_text("not json")  # damaged, with a journal: the journal is the truth
    assert [r["signature"] for r in RunFolder.open_read_only(folder.path).read_findings()] == ["sig-00", "sig-01"]
    folder.journal.unlink()  # damaged, and nothing else to read: one line naming it
    with pytest.raises(CampaignError, match=rf"^{folder.findings_json}: unreadable"):
        RunFolder.open_read_only(folder.path).read_findings()


def test_what_is_no_run_folder_is_refused_naming_the_file(tmp_path):
    folder = run_folder_with(tmp_path, 1)
    outside = tmp_path / "elsewhere.json"
    outside.write_text(folder.state_json.read_text())
    with pytest.raises(CampaignError, match=rf"^{tmp_path / 'missing'}: not a directory$"):
        RunFolder.open_read_only(tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CampaignError, match=rf"^{empty}: no campaign.json: not a run folder$"):
        RunFolder.open_read_only(empty)
    folder.state_json.unlink()
    Path(folder.state_json).symlink_to(outside)
    with pytest.raises(CampaignError, match=rf"^{folder.state_json}: a link out of the run folder: not read$"):
        RunFolder.open_read_only(folder.path)
