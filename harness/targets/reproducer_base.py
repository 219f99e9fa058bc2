"""What the reproducer writers (``harness/targets/<framework>/reproducer.py``) share: the comment
an op a framework did not run becomes, a metamorphic case's second run, and the check that says
whether a finding's divergence shows (``Check``)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from harness.case.inert import check_inert, without
from harness.case.ir import Program
from harness.escaping import comment_text, visible


def op_text(op: dict) -> str:
    """The op as one line of JSON (the comment above its translation): ASCII only, every line
    break and control character inside a string escaped, so it stays inside its comment."""
    return json.dumps(op, separators=(", ", ": "), ensure_ascii=True)


def comment_lines(prefix: str, i: int, op: dict, status: str, message: str | None) -> list[str]:
    """The comment that stands for op ``i`` where the framework did not run it. The status and
    message come from the repro JSON, written by a probe or another machine: every line of a
    message of several lines is commented (torch's load_state_dict errors are), and what would end
    a comment line is escaped (``escaping.comment_text``)."""
    first, *rest = comment_text(message or "")
    msg = f": {first}" if first else ""
    return [
        f"{prefix} op {i}: {op_text(op)}",
        f"{prefix}   not run: the framework reported `{visible(status)}`{msg}",
        *(f"{prefix}     {line.strip()}" for line in rest if line.strip()),
    ]


@dataclass(frozen=True)
class Run:
    """The second run of a metamorphic case: the case without its inert group, its lines labelled
    ``prefix`` and its ops numbered as in the case (``numbers``)."""

    program: Program
    repro: dict | None
    prefix: str
    numbers: tuple[int, ...]


def without_run(program: Program, repro: dict | None) -> Run | None:
    """A metamorphic case's second run (None for any other case); its statuses come from the
    repro JSON's ``without_inert`` part."""
    if not program.inert:
        return None

    group = check_inert(program, program.inert)
    numbers = tuple(i for i in range(len(program.ops)) if i not in group.ops)
    other = ((repro or {}).get("without_inert") or {}).get("targets")
    return Run(without(program, group), {"targets": other} if other else None, "without: ", numbers)


@dataclass(frozen=True)
class Check:
    """What a reproducer checks, to say whether its finding's divergence shows and exit 1 when it
    does (a regression test, and what ``bisect`` can run): after op ``op`` of the case (its first
    run, for a metamorphic case), ``subject`` holds ``want``, the values the divergence expects
    (``source`` says whose they are); with ``want`` None, the divergence is that op ``op``
    fails, or, with ``counter``, that op ``op`` changes ``subject``'s values and leaves its version
    counter where it was (torch's ``_version``: the write is hidden from autograd). Values agree
    within 1e-4, relative above 1; NaN agrees with NaN."""

    op: int
    subject: str | None
    want: tuple[float, ...] | None
    source: str
    counter: bool = False

    def label(self) -> str:
        """The line label of the op the check is after, as the reproducer prints it."""
        return f"after op {self.op}" if self.want is not None or self.counter else f"op {self.op}"
