"""The run folder: the one place that knows its layout (see ``harness.campaign`` for what each
file holds) and how a program is stored as bytes."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from .errors import CampaignError
from .files import atomic_write
from .ir import Program, TensorDecl, check_program




def program_to_bytes(p: Program) -> bytes:
    return json.dumps(p.to_wire(), sort_keys=True, separators=(",", ":")).encode()


def program_from_bytes(raw: bytes) -> Program:
    doc = json.loads(raw)
    tensors = tuple(TensorDecl(t["name"], t["kind"], tuple(t["shape"]),
                               tuple(t["value"]) if t.get("value") is not None else None,
                               tuple(t["grad"]) if t.get("grad") is not None else None,
                               t.get("init"), t.get("fill"), t.get("seed")) for t in doc["tensors"])
    return Program(tensors, check_program(tensors, doc["ops"]))


class RunFolder:
    """The one place that knows the run folder's layout."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.cases = self.path / "cases"
        self.journal = self.path / "findings.jsonl"
        self.findings_json = self.path / "findings.json"
        self.state_json = self.path / "campaign.json"

    def create(self) -> None:
        try:
            self.cases.mkdir(parents=True, exist_ok=True)
            probe = self.path / ".writable"
            probe.write_text("")
            probe.unlink()
        except OSError as e:
            raise CampaignError(f"{self.path}: cannot write the run folder: {e.strerror or e}") from None

    def load_findings(self) -> list[dict[str, Any]]:
        """The journal, tolerating a torn last line (a kill in the middle of a write)."""
        out = []
        if not self.journal.exists():
            return out
        for line in self.journal.read_text(encoding="utf-8").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    def load_state(self) -> dict[str, Any]:
        try:
            return json.loads(self.state_json.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise CampaignError(f"{self.path}: no campaign.json: not a run folder") from None
        except ValueError as e:
            raise CampaignError(f"{self.state_json}: unreadable ({e})") from None

    def save_state(self, state: dict[str, Any]) -> None:
        try:
            atomic_write(self.state_json, json.dumps(state, indent=2))
        except OSError as e:  # disk full, folder gone: one line, the journal is untouched
            raise CampaignError(f"{self.state_json}: cannot write ({e.strerror or e}); findings so far "
                                f"are intact in {self.journal}") from None

    def add_finding(self, record: dict[str, Any], minimized: str, original: str, repro: dict | None,
                    all_records: list[dict[str, Any]]) -> None:
        try:
            self._add_finding(record, minimized, original, repro, all_records)
        except OSError as e:
            raise CampaignError(f"{self.path}: cannot write a finding ({e.strerror or e}); the "
                                f"{len(all_records)} earlier finding(s) are intact in {self.journal}") from None

    def _add_finding(self, record: dict[str, Any], minimized: str, original: str, repro: dict | None,
                     all_records: list[dict[str, Any]]) -> None:
        """Writes the case files first, then the journal line, then the list: a finding is in
        the journal only once everything it points to exists."""
        n = len(all_records) + 1
        stem = f"{n:03d}-{hashlib.sha1(record['signature'].encode()).hexdigest()[:8]}"
        atomic_write(self.cases / f"{stem}.toml", minimized)
        atomic_write(self.cases / f"{stem}.original.toml", original)
        if repro is not None:
            atomic_write(self.cases / f"{stem}.json", json.dumps(repro, indent=1))
        record = {**record, "case": f"cases/{stem}.toml", "original_case": f"cases/{stem}.original.toml",
                  "repro": f"cases/{stem}.json" if repro is not None else None}
        line = json.dumps(record, sort_keys=True) + "\n"
        with open(self.journal, "a+b") as f:
            f.seek(0, os.SEEK_END)
            if f.tell():  # a torn last line (disk full, kill): start on a line of our own
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    line = "\n" + line
            f.write(line.encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
        all_records.append(record)
        atomic_write(self.findings_json, json.dumps(all_records, indent=1))


