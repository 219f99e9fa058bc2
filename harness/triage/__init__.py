"""Triage across runs: the store of root causes (``harness.triage.store``) and recording a run
folder in it (``record_folder``)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from harness.files import atomic_write
from harness.triage.store import RunDelta, TriageStore, run_kind

#: The store's file, beside the run folders (``reports/triage.sqlite``), unless given.
STORE_NAME = "triage.sqlite"
#: What a run showed against the run before it, written into the run folder for its report.
DELTA_NAME = "triage.json"


def default_store(run_folder: str | Path) -> Path:
    return Path(run_folder).resolve().parent / STORE_NAME


def record_folder(run_folder: str | Path, store: str | Path | None = None, option: str = "--triage") -> RunDelta:
    """Records a run folder's findings (harness errors left out) in the store, and writes the
    delta against the previous run into the folder (``DELTA_NAME``). ``store`` may be a Redis URL
    (``shared``): the run is recorded there, through a copy beside the run folder. Raises
    ``InputError`` (naming ``option`` for a Redis store that cannot be used)."""
    from harness.triage import shared

    if shared.is_shared(store):
        return shared.change(str(store), default_store(run_folder), option, lambda local: _record(run_folder, local))
    return _record(run_folder, store or default_store(run_folder))


def _record(run_folder: str | Path, store: str | Path) -> RunDelta:
    from harness.reporting.loading import load_run

    run = load_run(run_folder)
    started = datetime.fromtimestamp(float(run.state.get("started") or 0), timezone.utc)
    shown = [f for f in run.findings if not f.harness]
    cases = {f.record.signature: str(f.paths["case"]) for f in shown if "case" in f.paths}
    with TriageStore(store) as db:
        delta = db.record_run(str(run.root), started.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), run.programs,
                              [f.record for f in shown], cases,
                              kind=run_kind(run.config.get("profile"), run.state.get("targets") or {}))
    atomic_write(run.root / DELTA_NAME, json.dumps(delta.to_json(), indent=1) + "\n")
    return delta
