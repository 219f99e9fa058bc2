"""Making the folder of a new campaign (``RunFolder.create_new``), and undoing a set-up that
failed: which folders a new campaign may take, and what it removes again.

A new campaign takes a folder it creates, or an existing one that holds nothing but its own lock
file and empty folders of its layout (a set-up killed before it wrote anything). Undoing removes
the campaign's own files (``OWN_NAMES``) and the folders the set-up created, each only if it is
empty then: never a folder, or a file, that was there before.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from harness.errors import CampaignError

# The names of a run folder's files and folders (``RunFolder`` gives each its path).
STATE_NAME = "campaign.json"
JOURNAL_NAME = "findings.jsonl"
FINDINGS_NAME = "findings.json"
LOCK_NAME = "campaign.lock"
TORN_NAME = "findings.jsonl.torn"  # torn journal tails, moved aside before the next line is written
CASES_NAME = "cases"
CORPUS_NAME = "corpus"

# The files that make a folder a run folder: a new campaign refuses a folder holding any of them.
RUN_FILES = (STATE_NAME, JOURNAL_NAME, FINDINGS_NAME, TORN_NAME)
# What a new campaign may find in its --out and still take it: its own lock, and empty folders of
# its layout (a set-up killed before it wrote anything).
FRESH_FILES = (LOCK_NAME,)
FRESH_DIRS = (CASES_NAME, CORPUS_NAME)
# Everything a campaign itself puts in its folder: what a failed set-up removes again.
OWN_NAMES = (*RUN_FILES, CASES_NAME, CORPUS_NAME, LOCK_NAME)


def _why(e: OSError) -> str:
    return e.strerror or str(e)


def missing_parents(p: Path) -> list[Path]:
    """The parents of ``p`` that do not exist, deepest first."""
    parents = []
    q = p.parent
    while not q.exists() and q != q.parent:
        parents.append(q)
        q = q.parent
    return parents


def make_folder(p: Path, parents: list[Path]) -> bool:
    """Creates ``p`` (and its missing ``parents``); whether it created ``p`` (False: it was
    there). On failure the parents it created are removed again."""
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(p)
            return True
        except FileExistsError:
            if not p.is_dir():
                raise CampaignError(f"{p}: not a folder (--out must name a run folder)") from None
            return False
    except OSError as e:
        rmdirs(parents)
        raise CampaignError(f"{p}: cannot write the run folder: {_why(e)}") from None


def check_fresh(p: Path) -> set[str]:
    """Refuses a folder a new campaign must not take; returns the names (of ``FRESH_FILES``
    and ``FRESH_DIRS``) it holds already."""
    try:
        entries = list(os.scandir(p))
    except OSError as e:
        raise CampaignError(f"{p}: cannot read the run folder: {_why(e)}") from None
    names = {e.name for e in entries}
    if any(n in names for n in RUN_FILES):
        raise CampaignError(f"{p}: already holds a campaign: use --resume {p} or another --out")
    for e in entries:
        if e.name in FRESH_FILES and e.is_file(follow_symlinks=False):
            continue
        if e.name in FRESH_DIRS and e.is_dir(follow_symlinks=False) and not any(os.scandir(e.path)):
            continue
        raise CampaignError(
            f"{p}: not empty and not an aliasfuzz run folder (it holds {e.name!r}): give --out a new or empty folder"
        )
    return names


def remove_own_files(p: Path, kept: set[str]) -> None:
    """Removes the campaign's own files and folders (``OWN_NAMES``) from ``p``; those in
    ``kept`` (empty folders that were there before) are emptied and kept. Best effort: it runs
    while the set-up's own error goes up, which is what the user sees; a file that cannot be
    removed stays (and with it the folder)."""
    if not p.is_dir():
        return
    for name in OWN_NAMES:
        q = p / name
        try:
            if q.is_dir() and not q.is_symlink():
                shutil.rmtree(q)
                if name in kept:
                    q.mkdir()
            else:
                q.unlink(missing_ok=True)
        except OSError:
            pass  # best effort (see above)


def rmdirs(paths: Iterable[Path]) -> None:
    """Removes each folder (deepest first) while it is empty; stops at the first that is not."""
    for q in paths:
        try:
            q.rmdir()
        except OSError:
            break  # not empty (or not removable): it and the folders above it stay
