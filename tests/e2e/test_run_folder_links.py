"""A run folder whose own entries are symbolic links: ``fuzz --resume`` never writes through one.

Each test builds a real run folder (a campaign set up that has run nothing yet, so that a resume
runs programs, finds the TEST DOUBLE fake probe's planted bug and writes cases, journal lines and
corpus entries), replaces one of its entries with a link to a file or folder outside it, and runs
the real command line. The resume is refused with one line naming the entry, exit 2, and what the
link points to is left exactly as it was.

The tests of this subject that run in-process are in tests/unit/fuzzing/test_run_folder_links.py.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import run_cli
from tests.support.fake_targets import fake_probe_dir
from tests.support.run_folders import unstarted_run_folder


def resume(tmp_path: Path, out: Path):
    return run_cli(
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


def test_the_unlinked_folder_resumes_and_writes_cases_journal_and_corpus(tmp_path):
    """The control: without a link the same resume writes into each of the entries the tests
    below link out (so each of those tests would see a write through its link)."""
    out = unstarted_run_folder(tmp_path)
    r = resume(tmp_path, out)
    assert r.returncode in (0, 1), r.stdout[-2000:] + r.stderr[-2000:]
    assert (out / "findings.jsonl").read_text().strip()
    assert any((out / "cases").iterdir())
    assert any(p.is_file() for p in (out / "corpus").rglob("*"))
