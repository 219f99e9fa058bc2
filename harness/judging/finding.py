"""Findings: one divergence between two targets (``Finding``: its signature, its sentence and its
JSON form in a repro result, ``to_json``), and the record a campaign keeps of it
(``FindingRecord``: the one form of a finding in the run folder's journal and ``findings.json``,
which the reports, the history page and the JUnit file read)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Protocol

from harness.judging.pairs import REFERENCE_FRAMEWORK

#: The kinds of finding that hold a target against itself (``targets`` names it twice): the run
#: with and without inert ops (``metamorphic``), the model before and after a copy
#: (``sharing``), a tensor's values against its version counter (``version``). One target is
#: enough to show them; every other kind needs two targets the oracle compares.
SELF_KINDS = ("metamorphic", "sharing", "version")


@dataclass(frozen=True)
class Finding:
    kind: str  # device | variant | framework | value | error | crash | timeout | harness-error | metamorphic | sharing | version
    aspect: str  # status | verdict | identity | value | dtype | version | draw (metamorphic) | harness
    targets: tuple[str, str]
    op_label: str  # e.g. "step:sgd", "write:row"; "program" for whole-program failures
    method: str | None  # snapshot method involved, if any
    sides: tuple[str, str]  # what each target did, in ``targets`` order
    op_index: int = -1
    subject: str | None = None  # the tensor name (not part of the signature)
    detail: str = ""
    values: tuple[str, str] | None = None  # a value finding's two values (not part of the signature)
    at: str = ""  # a value finding on a larger tensor: the first differing element, e.g. "[1, 0]"
    # The declared kind (param, buffer, lazy) of the subject or of what it is a snapshot of, for
    # verdict and value findings (not part of the signature; a baseline entry may match it).
    role: str | None = None
    #: A ``metamorphic`` finding's inert group: the op indices whose removal changed the run.
    inert: tuple[int, ...] = ()
    #: A ``metamorphic`` value or status finding's agreement with the reference framework: which
    #: run (with or without the group, both, neither) holds its value or ends its op as the
    #: reference does (``metamorphic._agreement``); None where there is no reference. Part of the
    #: signature when set.
    agrees: str | None = None
    #: The name of the attribution rule that made it (``harness.judging.rules``; not part of the
    #: signature: a rule refined later must not make known findings new).
    rule: str = ""

    @property
    def signature(self) -> str:
        parts = [
            self.kind,
            "~".join(self.targets),
            self.aspect,
            self.method or "-",
            self.op_label,
            "~".join(self.sides),
        ]
        if self.agrees is not None:
            parts.append(f"agrees:{self.agrees}")
        return "|".join(parts)

    def sentence(self) -> str:
        a, b = self.targets
        sa, sb = self.sides
        if self.kind == "metamorphic":
            return self._metamorphic_sentence()
        if self.kind == "version":  # ``versions.hidden_writes``: one target against its own counter
            via = f" through its `{self.method}`" if self.method else ""
            return (
                f"On {a}, op {self.op_index} (`{self.op_label}`) changed {self.subject}{via} without"
                f" bumping its version counter: autograd's check of saved tensors cannot see the write."
                f" {self.detail}"
            ).strip()
        if self.kind == "sharing":  # ``sharing.changes``: one target, before and after a copy
            x, _, y = (self.subject or ",").partition(",")
            what = "one object" if self.aspect == "identity" else "one storage"
            done = f"split {x} and {y}, which were {what}" if sa == "shared" else f"made {x} and {y} {what}"
            return f"On {a}, op {self.op_index} (`{self.op_label}`) {done} in the model. {self.detail}".strip()
        if self.aspect == "verdict":
            return (
                f"After op {self.op_index} (`{self.op_label}`), the `{self.method}` snapshot"
                f" {self.subject} {_say(sa)} on {a} but {_say(sb)} on {b}."
            )
        if self.aspect == "identity":
            x, _, y = (self.subject or ",").partition(",")
            return (
                f"After op {self.op_index} (`{self.op_label}`), {x} and {y} are {sa} objects"
                f" on {a} but {sb} objects on {b}."
            )
        if self.aspect == "value":
            va, vb = self.values or ("?", "?")
            what = f"{self.subject}{self.at}"
            if {sa, sb} == {"changed", "unchanged"}:
                (moved, x), (still, y) = ((a, va), (b, vb)) if sa == "changed" else ((b, vb), (a, va))
                return (
                    f"After op {self.op_index} (`{self.op_label}`), {what} changed to"
                    f" {x} on {moved} but stayed {y} on {still}."
                )
            return f"After op {self.op_index} (`{self.op_label}`), {what} holds {va} on {a} but {vb} on {b}."
        if self.aspect == "dtype":
            when = (
                "As the program opens"
                if self.op_label == "program"
                else f"After op {self.op_index} (`{self.op_label}`)"
            )
            return f"{when}, {self.subject} is {sa} on {a} but {sb} on {b}."
        if self.aspect == "version":
            bumped, kept = (a, b) if sa == "bumped" else (b, a)
            return (
                f"After op {self.op_index} (`{self.op_label}`), the version counter of {self.subject}"
                f" moved on {bumped} but not on {kept}: autograd's check of saved tensors sees the"
                f" write on {bumped} only. {self.detail}"
            ).strip()
        if self.aspect == "harness":  # harness_errors.harness_error: the detail is a traceback
            return (
                f"aliasfuzz itself raised {sa} at {sb} while at stage `{self.op_label}`"
                f" ({self.subject}): a bug of aliasfuzz, not of a framework."
            )
        return f"Op {self.op_index} (`{self.op_label}`): {a} says {sa}, {b} says {sb}. {self.detail}".strip()

    def _metamorphic_sentence(self) -> str:
        """With / without the inert group, on the finding's one target."""
        group = (self.method or "+?").lstrip("+")
        where = f"with the inert `{group}` (op{'s' if len(self.inert) > 1 else ''} {', '.join(map(str, self.inert))})"
        sa, sb = self.sides
        if self.aspect == "draw":
            va, vb = self.values or ("?", "?")
            when = {"later": "later", "earlier": "earlier"}.get(sb, f"at `{sb}` too")
            return (
                f"On {self.targets[0]}, the lazy {self.subject} drew {va} {where} but {vb} without it: with the"
                f" group, `{sa}` initialised a lazy param that the run without it initialised {when}, so the"
                " program's generator was read in another order."
            )
        if self.aspect == "value":
            va, vb = self.values or ("?", "?")
            what = f"{self.subject}{self.at}"
            if {sa, sb} == {"changed", "unchanged"}:
                verb_a, verb_b = ("changed to", "stayed") if sa == "changed" else ("stayed", "changed to")
                said = (
                    f"On {self.targets[0]}, after op {self.op_index} (`{self.op_label}`), {what} {verb_a}"
                    f" {va} {where} but {verb_b} {vb} without it."
                )
            else:
                said = (
                    f"On {self.targets[0]}, after op {self.op_index} (`{self.op_label}`), {what} holds {va}"
                    f" {where} but {vb} without it."
                )
            return f"{said} {_AGREES[self.agrees]}".rstrip()
        if self.aspect == "identity":
            x, _, y = (self.subject or ",").partition(",")
            return (
                f"On {self.targets[0]}, after op {self.op_index} (`{self.op_label}`), {x} and {y} are {sa}"
                f" objects {where} but {sb} objects without it."
            )
        at = "the program" if self.op_label == "program" else f"op {self.op_index} (`{self.op_label}`)"
        said = f"On {self.targets[0]}, {at} says {sa} {where} but {sb} without it. {_AGREES[self.agrees]}".strip()
        return f"{said} {self.detail}".strip()

    def to_json(self) -> dict[str, Any]:
        return {
            "signature": self.signature,
            "kind": self.kind,
            "aspect": self.aspect,
            "targets": list(self.targets),
            "op": self.op_label,
            "op_index": self.op_index,
            "method": self.method,
            "sides": list(self.sides),
            "subject": self.subject,
            "values": None if self.values is None else list(self.values),
            "at": self.at,
            "role": self.role,
            **({"inert": list(self.inert)} if self.inert else {}),
            **({"agrees": self.agrees} if self.agrees is not None else {}),
            "sentence": self.sentence(),
            "detail": self.detail,
            "rule": self.rule,
        }


#: A metamorphic finding's last words, by its agreement with the reference framework.
_AGREES = {
    None: "",
    "with": f"{REFERENCE_FRAMEWORK} agrees with the run with it.",
    "without": f"{REFERENCE_FRAMEWORK} agrees with the run without it.",
    "both": f"{REFERENCE_FRAMEWORK} agrees with both, within tolerance.",
    "neither": f"{REFERENCE_FRAMEWORK} agrees with neither.",
}


def _say(verdict: str) -> str:
    return {
        "follows": "follows its source",
        "keeps": "keeps its value",
        "rev follows": "carries a write back into its source",
        "rev keeps": "takes a write without changing its source",
        "rev other": "carries a write into its source, which then holds neither value",
        "none": "sees no change",
        "other": "holds neither value",
    }.get(verdict, verdict)


# ------------------------------------------------------------------------------------------------
# The finding record: a finding as a run folder keeps it.

#: The fields of a finding record that name a file of the run folder (relative to it).
PATH_FIELDS = ("case", "original_case", "repro")

#: The record's text fields: ``FindingRecord.from_json`` reads a value of another JSON type as its
#: JSON text, so that a reader shows a hand-edited or damaged record rather than fail on it.
TEXT_FIELDS = (
    "signature",
    "kind",
    "status",
    "sentence",
    "detail",
    "op",
    "method",
    "baseline",
    "baseline_case",
    "outside_baseline",
    *PATH_FIELDS,
)


class ShrinkFacts(Protocol):
    """What a record keeps of a shrink (``shrinking.minimize.MinimizeResult`` is one)."""

    seconds: float
    complete: bool
    runs: int
    hypothesis_runs: int


@dataclass(frozen=True)
class FindingRecord:
    """A finding as a campaign records it: one line of the journal (``findings.jsonl``), one entry
    of ``findings.json``; the report, the history page and the JUnit file read it.

    ``to_json`` is its one serialised form (keys in this order; ``baseline_case`` only for a
    finding the baseline knows). ``from_json`` reads any record back, old or hand-edited: a
    missing field is None (``signature`` and ``kind`` "?", ``sentence`` "", ``targets`` empty), a
    text field (``TEXT_FIELDS``) of another JSON type is its JSON text, ``targets`` a list of
    strings; the other fields are as the document holds them. For a record ``to_json`` wrote,
    ``from_json(r.to_json()) == r``."""

    signature: str
    kind: str
    aspect: str | None
    status: str | None  # new | flaky | known
    baseline: str | None  # the id of the baseline entry that knows it
    targets: tuple[str, ...]
    op: str | None
    method: str | None
    sides: tuple[str, ...] | None
    values: tuple[str, ...] | None
    at: str | None
    sentence: str
    detail: str | None
    ops_before: int | None  # the ops of the program it was found in, and of its minimized case
    ops_after: int | None
    seconds_to_find: float | None
    shrink_seconds: float | None  # the shrink fields are None for a finding not shrunk
    shrink_complete: bool | None
    shrink_runs: int | None
    shrink_hypothesis_runs: int | None
    versions: dict[str, dict[str, str]] | None  # per target: framework versions
    baseline_case: str | None = None  # the baseline entry's own case, for a known finding
    # A new finding that an entry's patterns match but whose installed versions lie outside the
    # entry's ranges: "`id`: burn 0.23.0 is outside 0.22.1" (``Baseline.outside``).
    outside_baseline: str | None = None
    # Its confirmation (``Engine.confirm``): of ``confirm_runs`` runs of the minimized case on
    # fresh processes, ``confirmed`` showed it; None when not confirmed.
    confirmed: int | None = None
    confirm_runs: int | None = None
    #: The attribution rule that made the finding (``harness.judging.rules``); None in a record
    #: written before findings named their rule.
    rule: str | None = None
    # The framework a draft is addressed to where it is not the one ``filed_against`` derives
    # from the targets: the reference, when every other framework agrees against it. None: derived.
    against: str | None = None
    case: str | None = None  # the paths (PATH_FIELDS): set when the run folder stores it
    original_case: str | None = None
    repro: str | None = None

    @classmethod
    def found(
        cls,
        finding: Finding,
        *,
        status: str,
        baseline: str | None,
        baseline_case: str | None,
        ops_before: int,
        ops_after: int,
        seconds_to_find: float,
        shrink: ShrinkFacts | None,
        versions: Mapping[str, Mapping[str, str]],
        confirmed: tuple[int, int] | None = None,
        outside_baseline: str | None = None,
    ) -> FindingRecord:
        """The record of ``finding`` as a campaign found it. ``versions``: every target's
        (the record keeps those of the finding's targets); ``shrink``: None when not shrunk;
        ``confirmed``: (runs that showed it, runs) of its confirmation, None when not confirmed."""
        targets = tuple(t for t in finding.targets if t != "-")
        return cls(
            signature=finding.signature,
            kind=finding.kind,
            aspect=finding.aspect,
            status=status,
            baseline=baseline,
            targets=targets,
            op=finding.op_label,
            method=finding.method,
            sides=tuple(finding.sides),
            values=None if finding.values is None else tuple(finding.values),
            at=finding.at,
            sentence=finding.sentence(),
            detail=finding.detail,
            ops_before=ops_before,
            ops_after=ops_after,
            seconds_to_find=round(seconds_to_find, 3),
            shrink_seconds=round(shrink.seconds, 3) if shrink else None,
            shrink_complete=shrink.complete if shrink else None,
            shrink_runs=shrink.runs if shrink else None,
            shrink_hypothesis_runs=shrink.hypothesis_runs if shrink else None,
            versions={t: dict(versions.get(t, {})) for t in targets},
            baseline_case=baseline_case if baseline is not None else None,
            outside_baseline=outside_baseline if baseline is None else None,
            confirmed=confirmed[0] if confirmed else None,
            confirm_runs=confirmed[1] if confirmed else None,
            rule=finding.rule or None,
        )

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if (
                f.name == "baseline_case"
                and self.baseline is None
                or f.name in ("outside_baseline", "against")
                and value is None
            ):
                continue
            doc[f.name] = list(value) if isinstance(value, tuple) else value
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> FindingRecord:
        kw: dict[str, Any] = {}
        for f in fields(cls):
            value = doc.get(f.name)
            if f.name in TEXT_FIELDS:
                value = _text(value)
            elif isinstance(value, list) and f.name in ("sides", "values"):
                value = tuple(value)
            kw[f.name] = value
        targets = doc.get("targets")
        kw["targets"] = (
            tuple(str(t) for t in targets) if isinstance(targets, list) else (str(targets),) if targets else ()
        )
        kw["signature"], kw["kind"], kw["sentence"] = kw["signature"] or "?", kw["kind"] or "?", kw["sentence"] or ""
        return cls(**kw)


def stored_record(doc: Mapping[str, Any], case: str, original_case: str, repro: str | None) -> dict[str, Any]:
    """A record's JSON form with the paths of the files the run folder stored it with
    (``PATH_FIELDS``, relative to the run folder), in their place at the end."""
    return {**doc, "case": case, "original_case": original_case, "repro": repro}


def _text(v: Any) -> str | None:
    return None if v is None else v if isinstance(v, str) else json.dumps(v)
