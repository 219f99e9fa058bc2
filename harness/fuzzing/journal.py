"""The findings journal (``findings.jsonl``) as bytes: one finding record (JSON object, sorted keys)
per line, appended and fsync'ed, never rewritten.

A kill in the middle of an append leaves a torn last line. Reading tolerates exactly that (and
blank lines); appending first moves a torn last line aside into the torn file
(``findings.jsonl.torn``, fsync'ed) and cuts it off, so the journal stays one finding per line and
no byte of it is lost. Any other line that is not a finding is a ``CampaignError``
"FILE:LINE: why".
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from harness.errors import CampaignError
from harness.fuzzing.run_state import json_kind, record_problem, utf8_text


@dataclass(frozen=True)
class JournalRead:
    records: list[dict[str, Any]]
    line_numbers: list[int]  # of each record, from 1
    torn_at: int | None  # the byte offset of a torn last line, or None


def parse_journal(raw: bytes, name: str | Path, required: Iterable[str] = ()) -> JournalRead:
    """The records of a journal's bytes; each has a string ``signature`` and the ``required``
    keys (``run_state.record_problem``). ``name`` is the file, for messages."""
    records: list[dict[str, Any]] = []
    numbers: list[int] = []
    torn: int | None = None
    offset = 0
    lines = raw.split(b"\n")
    for i, line in enumerate(lines, 1):
        start, offset = offset, offset + len(line) + 1
        last = i == len(lines)  # the bytes after the last newline: empty, or a torn write
        if not line.strip(b" \t\r\0"):
            if last and line:
                torn = start
            continue
        text = utf8_text(line, f"{name}:{i}", "a journal line")
        try:
            rec = json.loads(text)
        except RecursionError:
            raise CampaignError(f"{name}:{i}: not JSON (nested too deeply)") from None
        except ValueError as e:
            if last and text.lstrip().startswith("{"):
                torn = start  # a kill in the middle of a write: not a finding yet
                continue
            raise CampaignError(f"{name}:{i}: not JSON ({e})") from None
        if not isinstance(rec, dict):
            raise CampaignError(f"{name}:{i}: not a finding (a JSON object), found {json_kind(rec)}")
        problem = record_problem(rec, required)
        if problem:
            raise CampaignError(f"{name}:{i}: {problem}")
        records.append(rec)
        numbers.append(i)
    return JournalRead(records, numbers, torn)


def journal_lines(records: Iterable[Mapping[str, Any]]) -> bytes:
    """The journal's bytes for ``records`` (record JSON forms), one line each."""
    return "".join(json.dumps(r, sort_keys=True) + "\n" for r in records).encode("utf-8")


def append(journal: Path, torn_file: Path, data: bytes) -> None:
    """Appends whole lines to the journal and fsyncs it, after setting a torn last line aside.
    Raises ``OSError`` as the file system does (the caller says what is intact)."""
    with _open_no_link(journal, "a+b") as f:
        _end_on_a_line(f, torn_file)
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _open_no_link(path: Path, mode: str) -> BinaryIO:
    """``open(path, mode)`` for appending, refusing a symbolic link (``OSError`` ELOOP): lines
    appended through one would land in the file it points to, outside the run folder."""
    flags = os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_RDWR if "+" in mode else os.O_WRONLY)
    return os.fdopen(os.open(path, flags, 0o666), mode)


def _end_on_a_line(f: BinaryIO, torn_file: Path) -> None:
    """Before appending to the journal (open in ``a+b``): a complete last line whose newline
    is missing gets it; a torn one (a kill mid-write, or anything else that is not a
    finding) is appended to ``torn_file`` (fsync'ed) and then cut off."""
    size = f.seek(0, os.SEEK_END)
    if not size:
        return
    start, block = size, b""
    while start > 0:  # find the start of the last line, reading back from the end
        step = min(65536, start)
        f.seek(start - step)
        block = f.read(step) + block
        start -= step
        nl = block.rfind(b"\n")
        if nl >= 0:
            start += nl + 1
            block = block[nl + 1 :]
            break
    if not block:
        return
    try:
        rec = json.loads(block.decode("utf-8"))
        complete = isinstance(rec, dict) and record_problem(rec) is None
    except (ValueError, RecursionError):  # not JSON (UnicodeDecodeError is a ValueError): torn
        complete = False
    if complete:
        f.write(b"\n")
        return
    with _open_no_link(torn_file, "ab") as t:
        t.write(block + b"\n")
        t.flush()
        os.fsync(t.fileno())
    f.truncate(start)
    f.flush()
    os.fsync(f.fileno())
    f.seek(0, os.SEEK_END)
