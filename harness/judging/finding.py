"""The finding record: one divergence between two targets, its signature, its sentence and its
one serialised form (``to_json``), which the run folder's journal, ``findings.json``, the reports
and the baseline all read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Finding:
    kind: str  # device | variant | framework | value | error | crash | timeout | harness-error
    aspect: str  # status | verdict | identity | value | harness
    targets: tuple[str, str]
    op_label: str  # e.g. "step:sgd", "write:row"; "program" for whole-program failures
    method: str | None  # snapshot method involved, if any
    sides: tuple[str, str]  # what each target did, in ``targets`` order
    op_index: int = -1
    subject: str | None = None  # the tensor name (not part of the signature)
    detail: str = ""
    values: tuple[str, str] | None = None  # a value finding's two values (not part of the signature)
    at: str = ""  # a value finding on a larger tensor: the first differing element, e.g. "[1, 0]"

    @property
    def signature(self) -> str:
        parts = [self.kind, "~".join(self.targets), self.aspect, self.method or "-", self.op_label,
                 "~".join(self.sides)]
        return "|".join(parts)

    def sentence(self) -> str:
        a, b = self.targets
        sa, sb = self.sides
        if self.aspect == "verdict":
            return (f"After op {self.op_index} (`{self.op_label}`), the `{self.method}` snapshot"
                    f" {self.subject} {_say(sa)} on {a} but {_say(sb)} on {b}.")
        if self.aspect == "identity":
            x, _, y = (self.subject or ",").partition(",")
            return (f"After op {self.op_index} (`{self.op_label}`), {x} and {y} are {sa} objects"
                    f" on {a} but {sb} objects on {b}.")
        if self.aspect == "value":
            va, vb = self.values or ("?", "?")
            what = f"{self.subject}{self.at}"
            if {sa, sb} == {"changed", "unchanged"}:
                (moved, x), (still, y) = ((a, va), (b, vb)) if sa == "changed" else ((b, vb), (a, va))
                return (f"After op {self.op_index} (`{self.op_label}`), {what} changed to"
                        f" {x} on {moved} but stayed {y} on {still}.")
            return f"After op {self.op_index} (`{self.op_label}`), {what} holds {va} on {a} but {vb} on {b}."
        if self.aspect == "harness":  # harness_errors.harness_error: the detail is a traceback
            return (f"aliasfuzz itself raised {sa} at {sb} while at stage `{self.op_label}`"
                    f" ({self.subject}): a bug of aliasfuzz, not of a framework.")
        return f"Op {self.op_index} (`{self.op_label}`): {a} says {sa}, {b} says {sb}. {self.detail}".strip()

    def to_json(self) -> dict[str, Any]:
        return {"signature": self.signature, "kind": self.kind, "aspect": self.aspect,
                "targets": list(self.targets), "op": self.op_label, "op_index": self.op_index,
                "method": self.method, "sides": list(self.sides), "subject": self.subject,
                "values": None if self.values is None else list(self.values), "at": self.at,
                "sentence": self.sentence(), "detail": self.detail}


def _say(verdict: str) -> str:
    return {"follows": "follows its source", "keeps": "keeps its value",
            "rev follows": "carries a write back into its source",
            "rev keeps": "takes a write without changing its source",
            "none": "sees no change", "other": "holds neither value"}.get(verdict, verdict)
