"""What a finding hands over to a person: its stand-alone reproducers and, for a finding that is
not known, the draft of its upstream report (``issue_draft``), written beside its case.

A campaign's report (``report.write_run_reports``) and ``aliasfuzz draft CASE.toml`` both call
``write_hand_over``, so a draft made on demand from any case file is the one a campaign writes.
A known finding gets none in a campaign's run folder: its baseline entry's case is its minimal
form, and ``aliasfuzz draft`` turns that case into reproducers when someone asks.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.case.case_file import load_case
from harness.case.ir import Program
from harness.judging.finding import Finding, FindingRecord
from harness.judging.pairs import REFERENCE_FRAMEWORK
from harness.reporting.issue_draft import filed_against, issue_markdown
from harness.targets import reproducers
from harness.targets.reproducer_base import Check

#: The statuses of a finding that get reproducers and a draft in a campaign's run folder.
HANDED_OVER = ("new", "flaky")


def divergence_of(repro: Mapping[str, Any] | None, signature: str) -> Mapping[str, Any] | None:
    """The entry of ``signature`` in a repro JSON's ``divergences`` (None when it has none)."""
    for d in (repro or {}).get("divergences") or []:
        if isinstance(d, dict) and d.get("signature") == signature:
            return d
    return None


#: The aspects a reproducer can check by values or by a failing call; identity, storage sharing
#: and draw order are shown by the printed lines, not checked.
_CHECKED_ASPECTS = ("value", "verdict", "status")


def check_of(record: FindingRecord | Finding, repro: Mapping[str, Any] | None, framework: str) -> Check | None:
    """What the reproducer of ``framework`` checks to say whether ``record``'s divergence shows:
    the subject's values after the op, as the other side of the divergence holds them (the other
    target, or for a metamorphic finding the run without the inert ops), or the op failing. None
    where there is nothing to check: another kind or aspect, a side not of ``framework``, or a
    value the repro JSON does not hold."""
    d = divergence_of(repro, record.signature)
    targets = list(record.targets)
    if (
        d is not None
        and record.aspect == "version"
        and targets
        and all(t.split(":", 1)[0] == framework for t in targets)
    ):
        # a write hidden from the target's own version counter, or a counter one variant moves
        # and another does not: the script watches the counter
        index, subject = d.get("op_index"), d.get("subject")
        if isinstance(index, int) and index >= 0 and subject:
            return Check(index, subject, None, "the version counter", counter=True)
        return None
    if d is None or len(targets) != 2 or record.aspect not in _CHECKED_ASPECTS:
        return None
    if record.kind in ("device", "variant", "sharing"):  # one framework on both sides: no other side to run
        return None
    index, subject = d.get("op_index"), d.get("subject")
    if not isinstance(index, int) or index < 0:
        return None
    mine = (
        0
        if record.kind == "metamorphic"
        else next((k for k, t in enumerate(targets) if t.split(":", 1)[0] == framework), None)
    )
    if mine is None or targets[mine].split(":", 1)[0] != framework:
        return None
    sides = list(record.sides or ())
    if record.aspect == "status":
        if len(sides) == 2 and sides[mine] == "error":
            other = "the run without the inert ops" if record.kind == "metamorphic" else targets[1 - mine]
            return Check(index, None, None, f"it fails; {other} runs it")
        return None
    if not subject:
        return None
    docs = (repro or {}).get("targets") or {}
    if record.kind == "metamorphic":
        without = (repro or {}).get("without_inert") or {}
        numbers = [
            i
            for i in range(len((docs.get(targets[0]) or {}).get("ops") or []))
            if i not in set(without.get("inert") or [])
        ]
        other = (without.get("targets") or {}).get(targets[0])
        if other is None or index not in numbers:
            return None
        state = reproducers.trace_states(other).get(numbers.index(index), {})
        source = f"{targets[0]} without the inert ops"
    else:
        other = docs.get(targets[1 - mine])
        if other is None:
            return None
        state = reproducers.trace_states(other).get(index, {})
        source = targets[1 - mine]
    want = state.get(subject)
    if not isinstance(want, list):  # uninitialized or unreadable there
        return None
    return Check(index, subject, tuple(want), source)


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


def odd_one_out(record: FindingRecord, repro: Mapping[str, Any] | None) -> str | None:
    """The reference framework (torch), when the repro JSON shows it alone against the others on a
    value finding's tensor after its op: at least two other frameworks hold it there, they hold the
    same values, and torch's differ. A draft of such a finding is about torch, though its targets
    pair it with one of them. None otherwise: a call that fails where torch runs is often the
    stricter reading, not a bug of torch, and frameworks differ in identity, storage and copy
    semantics by design, so agreement against torch says nothing about who is wrong there."""
    me = divergence_of(repro, record.signature)
    if me is None or record.kind != "value" or record.aspect != "value" or not isinstance(me.get("op_index"), int):
        return None
    index, subject = me["op_index"], me.get("subject")
    held: dict[str, set] = {}
    for tid, doc in ((repro or {}).get("targets") or {}).items():
        if str(tid).split(":", 1)[0] == REFERENCE_FRAMEWORK and tid not in record.targets:
            # torch's own variants (``+compile``, ``+inductor``) say what torch should do, not what it does here
            continue
        values = reproducers.trace_states(doc).get(index, {}).get(subject) if doc.get("status") == "ok" else None
        if isinstance(values, list):
            held.setdefault(str(tid).split(":", 1)[0], set()).add(tuple(round(float(x), 4) for x in values))
    reference = held.pop(REFERENCE_FRAMEWORK, None)
    others = {v for vs in held.values() for v in vs}
    if reference is None or len(held) < 2 or len(others) != 1 or others & reference:
        return None
    return REFERENCE_FRAMEWORK


def write_hand_over(
    folder: Path,
    stem: str,
    record: FindingRecord,
    *,
    draft: bool = True,
    bisection: str | None = None,
    shown_in: str = "",
) -> list[Path]:
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
    against = odd_one_out(record, repro)
    if against is not None:
        record = dataclasses.replace(record, against=against)
    framework = filed_against(record)
    check = check_of(record, repro, framework)
    made = reproducers.write_reproducers(
        folder,
        {"targets": list(record.targets), "case": case_path.name, "repro": record.repro if repro is not None else None},
        check,
        framework,
    )
    if draft:
        made.append(_write_draft(folder, stem, record, program, repro, bisection, shown_in, check))
    return made


def _check_lines(
    check: Check, repro: Mapping[str, Any] | None, target: str | None, variants: tuple[str, str] | None = None
) -> list[str]:
    """What a checked reproducer prints at its end, as the probe's observations say it will.
    ``variants``: the two targets of a finding between two variants of one framework (eager and
    compiled torch), whose script runs both and compares whether the op moved the counter."""
    if check.counter and variants is not None:
        moved = []
        for side in variants:
            before, after = _versions_at(repro, side, check.op, check.subject or "")
            if before is None or after is None:
                return ["the divergence shows"]
            moved.append(before != after)
        variant = reproducers.variant_of(variants[1])  # the label the script's second run has
        return [
            f"check: op {check.op} moves the version counter of {check.subject}: {moved[0]} without {variant},"
            f" {moved[1]} with it",
            f"the divergence shows: {[f'{check.subject}._version']} differ",
        ]
    if check.counter:
        before, after = _versions_at(repro, target, check.op, check.subject or "")
        if before is None or after is None:
            return ["the divergence shows"]
        return [
            f"check: {check.subject}: values changed, version counter {before} -> {after}: the write is hidden"
            " from autograd",
            "the divergence shows",
        ]
    if check.want is None:
        return ["the divergence shows"]
    doc = ((repro or {}).get("targets") or {}).get(target or "")
    got = reproducers.trace_states(doc).get(check.op, {}).get(check.subject or "") if doc else None
    if not isinstance(got, list):
        return []
    want = "[" + ", ".join(f"{v:g}" for v in check.want) + "]"
    return [
        f"check: {check.subject} = {_short(got)}; the divergence expects {want} ({check.source}): it differs",
        "the divergence shows",
    ]


def _versions_at(
    repro: Mapping[str, Any] | None, target: str | None, op: int, name: str
) -> tuple[int | None, int | None]:
    """The version counter of ``name`` before and after op ``op``, as ``target``'s observations
    in the repro JSON say (None where they hold none)."""
    doc = ((repro or {}).get("targets") or {}).get(target or "") or {}
    version = ((doc.get("initial") or {}).get(name) or {}).get("version")
    history = [version]  # the counter after each op, the opening first
    for step in doc.get("trace") or []:
        seen = (step.get("changed") or {}).get(name)
        if seen is not None:
            version = seen.get("version")
        history.append(version)
    if op + 1 >= len(history):
        return None, None
    return history[op], history[op + 1]


def _write_draft(
    folder: Path,
    stem: str,
    record: FindingRecord,
    program: Program,
    repro: Mapping[str, Any] | None,
    bisection: str | None,
    shown_in: str,
    check: Check | None,
) -> Path:
    """``<stem>.issue.md``, with the reproducer of the framework it is addressed to (its cargo
    project's main.rs, or the torch script)."""
    framework = filed_against(record)
    code, language = folder / f"{stem}-{framework}" / "src" / "main.rs", "rust"
    if not code.is_file():
        code, language = folder / f"{stem}.torch.py", "python"
    reproducer = None
    if code.is_file():
        reproducer = (shown_in + code.relative_to(folder).as_posix(), language, code.read_text(encoding="utf-8"))
    shown = framework if language == "rust" else REFERENCE_FRAMEWORK
    output = observed_output(repro, shown, record.targets)
    checked = check is not None and shown == framework
    if output is not None and checked:
        target = output.splitlines()[0].strip("()")
        variants = tuple(record.targets) if record.kind == "variant" and len(record.targets) == 2 else None
        output += "".join("\n" + line for line in _check_lines(check, repro, target, variants))
    draft = folder / f"{stem}.issue.md"
    text = issue_markdown(
        record,
        f"{shown_in}{stem}.toml",
        (folder / f"{stem}.toml").read_text(encoding="utf-8"),
        reproducer,
        program=program,
        divergence=divergence_of(repro, record.signature),
        output=output,
        bisection=bisection,
        checked=checked,
    )
    draft.write_text(text, encoding="utf-8")
    return draft
