"""``RunFolder.open_read_only``: how the reports and the history page read a run folder, without
its lock (a campaign may be running in it) and without writing anything.

The tests of this subject that run in-process are in tests/unit/fuzzing/test_run_folder_read_only.py.
"""

from __future__ import annotations

import pytest

from harness.fuzzing.run_folder import RunFolder
from tests.support.run_folders import holder, run_folder_with, snapshot


def test_a_folder_another_campaign_holds_is_read_without_its_lock(tmp_path):
    folder = run_folder_with(tmp_path, 3)
    other = holder(folder.path)
    try:
        before = snapshot(folder.path)
        reader = RunFolder.open_read_only(folder.path)
        assert reader.root == folder.path.resolve() and not reader.locked
        assert reader.load_state()["programs"] == 192
        assert [r["signature"] for r in reader.read_findings()] == ["sig-00", "sig-01", "sig-02"]
        for write in (
            reader.acquire,
            lambda: reader.save_state(reader.load_state()),
            reader.create,
            lambda: reader.add_finding({"signature": "x"}, "#\n", "#\n", None, []),
            reader.reconcile,
            reader.ensure_findings_list,
        ):
            with pytest.raises(RuntimeError, match="opened read-only"):
                write()
        assert snapshot(folder.path) == before  # the lock file and everything else untouched
    finally:
        other.kill()
        other.wait(timeout=10)
