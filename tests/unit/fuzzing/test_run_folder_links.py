"""A run folder whose own entries are symbolic links: ``fuzz --resume`` never writes through one.

Each test builds a real run folder (a campaign set up that has run nothing yet, so that a resume
runs programs, finds the TEST DOUBLE fake probe's planted bug and writes cases, journal lines and
corpus entries), replaces one of its entries with a link to a file or folder outside it, and runs
the real command line. The resume is refused with one line naming the entry, exit 2, and what the
link points to is left exactly as it was.

The tests here run in this process (the command line through ``run_cli_in_process``), as the
unit tier requires; those that need real processes are in tests/e2e/test_run_folder_links.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harness.errors import CampaignError
from harness.fuzzing.run_folder import RunFolder
from tests.conftest import run_cli_in_process
from tests.support.fake_targets import fake_probe_dir
from tests.support.run_folders import one_line_error, snapshot, unstarted_run_folder


def resume(tmp_path: Path, out: Path):
    return run_cli_in_process(
        "fuzz",
        "--resume",
        str(out),
        "--max-programs",
        "16",
        "--confirm",
        "0",
        "--no-report",
        env=fake_probe_dir(tmp_path),
        timeout=300,
    )


@pytest.mark.parametrize("name", ["campaign.lock", "findings.jsonl"])
def test_a_file_linked_out_of_the_folder_is_never_written(tmp_path, name):
    out = unstarted_run_folder(tmp_path)
    victim = tmp_path / "victim.txt"
    # An empty file reads as an empty journal: a resume would append its findings to it (and,
    # as findings.json is ahead of it, first restore the one that list holds).
    text = "" if name == "findings.jsonl" else "the user's own file\n"
    victim.write_text(text)
    if name == "findings.jsonl":
        (out / "findings.json").write_text(json.dumps([{"signature": "sig-01", "kind": "device", "status": "new"}]))
    (out / name).symlink_to(victim)
    one_line_error(resume(tmp_path, out), f"{out / name}: a symbolic link", "nothing is written through a link")
    assert victim.read_text() == text
    assert (out / name).is_symlink()  # the link itself is left as it was too


@pytest.mark.parametrize("name", ["cases", "corpus"])
def test_a_folder_linked_out_of_the_folder_is_never_written(tmp_path, name):
    out = unstarted_run_folder(tmp_path)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("the user's own file\n")
    if (out / name).exists():
        (out / name).rmdir()
    (out / name).symlink_to(victim, target_is_directory=True)
    before = snapshot(victim)
    one_line_error(resume(tmp_path, out), f"{out / name}: a symbolic link", "nothing is written through a link")
    assert snapshot(victim) == before


def test_a_link_between_the_folders_own_files_is_refused_too(tmp_path):
    """A lock file linked to the folder's own campaign.json would truncate the campaign's state."""
    out = unstarted_run_folder(tmp_path)
    state = (out / "campaign.json").read_bytes()
    (out / "campaign.lock").symlink_to("campaign.json")
    with pytest.raises(CampaignError, match="campaign.lock: a symbolic link"):
        RunFolder.open_existing(out)
    assert (out / "campaign.json").read_bytes() == state


def test_a_campaign_json_linked_out_is_not_even_read_by_a_resume(tmp_path):
    out = unstarted_run_folder(tmp_path)
    victim = tmp_path / "victim.json"
    os.replace(out / "campaign.json", victim)
    (out / "campaign.json").symlink_to(victim)
    before = victim.read_bytes()
    one_line_error(resume(tmp_path, out), f"{out / 'campaign.json'}: a link out of the run folder")
    assert victim.read_bytes() == before
