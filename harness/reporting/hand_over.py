"""What a finding hands over to a person: its stand-alone reproducers and, for a finding that is
not known, the draft of its upstream report (``issue_draft``), written beside its case.

A campaign's report (``report.write_run_reports``) and ``aliasfuzz draft CASE.toml`` both call
``write_hand_over``, so a draft made on demand from any case file is the one a campaign writes.
A known finding gets none in a campaign's run folder: its baseline entry's case is its minimal
form, and ``aliasfuzz draft`` turns that case into reproducers when someone asks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from harness.case.ir import Program, load_case
from harness.judging.finding import FindingRecord
from harness.reporting import reproducers
from harness.reporting.issue_draft import filed_against, issue_markdown

#: The statuses of a finding that get reproducers and a draft in a campaign's run folder.
HANDED_OVER = ("new", "flaky")


def divergence_of(repro: Mapping[str, Any] | None, signature: str) -> Mapping[str, Any] | None:
    """The entry of ``signature`` in a repro JSON's ``divergences`` (None when it has none)."""
    for d in (repro or {}).get("divergences") or []:
        if isinstance(d, dict) and d.get("signature") == signature:
            return d
    return None


def _short(values: Any) -> str:
    if isinstance(values, str):
        return values
    return "[" + ", ".join(f"{v:g}" for v in values) + "]"


def observed_output(repro: Mapping[str, Any] | None, framework: str, targets: tuple[str, ...]) -> str | None:
    """What the probe of ``framework`` observed, op by op: each op's changed names (and a failed
    op's error), in the reproducer's ``after op N: name = [...]`` words. The target is the
    finding's own of that framework, else the first of it in the repro JSON."""
    doc = (repro or {}).get("targets") or {}
    tid = next((t for t in targets if t in doc and t.split(":", 1)[0] == framework), None)
    tid = tid or next((t for t in doc if t.split(":", 1)[0] == framework), None)
    if tid is None:
        return None
    states = reproducers.trace_states(doc[tid])
    lines = [f"initial: {n} = {_short(v)}" for n, v in (states.get(None) or {}).items()]
    before = dict(states.get(None) or {})
    for i, step in enumerate(doc[tid].get("ops") or []):
        after = states.get(i, before)
        if step.get("status", "ok") != "ok":
            message = (step.get("message") or "").strip().splitlines()
            lines.append(f"op {i}: {step.get('status')}" + (f": {message[0]}" if message else ""))
        lines += [f"after op {i}: {n} = {_short(v)}" for n, v in after.items() if before.get(n) != v]
        before = after
    return f"({tid})\n" + "\n".join(lines)


def write_hand_over(folder: Path, stem: str, record: FindingRecord, *, draft: bool = True,
                    bisection: str | None = None, shown_in: str = "") -> list[Path]:
    """Writes the reproducers of ``record`` and, when ``draft``, its ``<stem>.issue.md``, into
    ``folder``, which holds its case ``<stem>.toml`` and the repro JSON ``record.repro`` names
    (if any); returns the paths made (the script, each cargo project's folder, the draft).
    ``shown_in``: the folder the files end up in, as the draft names their paths (a run folder's
    ``cases/``; empty: where the draft is)."""
    case_path = folder / f"{stem}.toml"
    program: Program = load_case(case_path)
    repro = None
    if record.repro:
        try:
            repro = json.loads((folder / record.repro).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            repro = None
    made = reproducers.write_reproducers(folder, {"targets": list(record.targets), "case": case_path.name,
                                                  "repro": record.repro if repro is not None else None})
    if draft:
        made.append(_write_draft(folder, stem, record, program, repro, bisection, shown_in))
    return made


def _write_draft(folder: Path, stem: str, record: FindingRecord, program: Program,
                 repro: Mapping[str, Any] | None, bisection: str | None, shown_in: str) -> Path:
    """``<stem>.issue.md``, with the reproducer of the framework it is addressed to (its cargo
    project's main.rs, or the torch script)."""
    framework = filed_against(record)
    code, language = folder / f"{stem}-{framework}" / "src" / "main.rs", "rust"
    if not code.is_file():
        code, language = folder / f"{stem}.torch.py", "python"
    reproducer = None
    if code.is_file():
        reproducer = (shown_in + code.relative_to(folder).as_posix(), language, code.read_text(encoding="utf-8"))
    shown = framework if language == "rust" else "torch"
    draft = folder / f"{stem}.issue.md"
    text = issue_markdown(record, f"{shown_in}{stem}.toml", (folder / f"{stem}.toml").read_text(encoding="utf-8"), reproducer,
                          program=program, divergence=divergence_of(repro, record.signature),
                          output=observed_output(repro, shown, record.targets), bisection=bisection)
    draft.write_text(text, encoding="utf-8")
    return draft
