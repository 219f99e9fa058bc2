"""Triage across runs: the store of root causes (``harness.triage.store``) and recording a run
folder in it (``record_folder``)."""

from __future__ import annotations

import json
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from harness.files import atomic_write
from harness.fuzzing.run_loading import load_run
from harness.triage import shared
from harness.triage.store import RunDelta, TriageError, TriageStore, run_kind

#: The store's file, beside the run folders (``reports/triage.sqlite``), unless given.
STORE_NAME = "triage.sqlite"
#: What a run showed against the run before it, written into the run folder for its report.
DELTA_NAME = "triage.json"


def default_store(run_folder: str | Path) -> Path:
    return Path(run_folder).resolve().parent / STORE_NAME


def record_folder(run_folder: str | Path, store: str | Path | None = None, option: str = "--triage") -> RunDelta:
    """Records a run folder's findings (harness errors left out) in the store, and writes the
    delta against the previous run into the folder (``DELTA_NAME``). ``store`` may be a Redis URL
    (``shared``): the run is recorded there through a temporary copy; the local store beside the
    run folder is only read (to start an empty key from). Raises ``InputError`` (naming ``option``
    for a Redis store that cannot be used)."""

    if shared.is_shared(store):
        with tempfile.TemporaryDirectory(prefix="aliasfuzz-triage-") as tmp:
            return shared.change(
                str(store),
                Path(tmp) / STORE_NAME,
                option,
                lambda work: _record(run_folder, work),
                seed=default_store(run_folder),
            )
    return _record(run_folder, store or default_store(run_folder))


def read_delta(run_folder: str | Path) -> RunDelta | None:
    """The run folder's ``triage.json`` (what the run showed against the run before it); None
    when the run was not recorded. A damaged file raises a ``TriageError`` naming the file and
    the field."""
    path = Path(run_folder) / DELTA_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise TriageError(f"{path}: cannot be read ({e})") from None
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise TriageError(f"{path}: not JSON ({e})") from None
    if not isinstance(doc, dict):
        raise TriageError(f"{path}: must be a JSON object, found {type(doc).__name__}")

    def ids(key: str, required: bool = True) -> tuple[str, ...]:
        value = doc.get(key, None if required else [])
        if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
            raise TriageError(f"{path}: {key}: must be a list of root cause ids, found {json.dumps(value)[:60]}")
        return tuple(value)

    previous = doc.get("previous_run")
    if previous is not None and not isinstance(previous, str):
        raise TriageError(
            f"{path}: previous_run: must be a run folder (a string) or null, found {json.dumps(previous)[:60]}"
        )
    first_seen_at = doc.get("first_seen_at", {})
    if not isinstance(first_seen_at, dict) or not all(isinstance(v, str) for v in first_seen_at.values()):
        raise TriageError(
            f"{path}: first_seen_at: must be an object of root cause -> time, found {json.dumps(first_seen_at)[:60]}"
        )
    return RunDelta(
        ids("first_seen"),
        ids("disappeared"),
        ids("regressed"),
        previous,
        ids("first_seen_known", required=False),
        dict(first_seen_at),
    )


def _record(run_folder: str | Path, store: str | Path) -> RunDelta:

    run = load_run(run_folder)
    started = datetime.fromtimestamp(float(run.state.get("started") or 0), UTC)
    shown = [f for f in run.findings if not f.harness]
    cases = {f.record.signature: str(f.paths["case"]) for f in shown if "case" in f.paths}
    with TriageStore(store) as db:
        delta = db.record_run(
            str(run.root),
            started.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            run.programs,
            [f.record for f in shown],
            cases,
            kind=run_kind(run.config.get("profile"), run.state.get("targets") or {}),
        )
    atomic_write(run.root / DELTA_NAME, json.dumps(delta.to_json(), indent=1) + "\n")
    return delta
