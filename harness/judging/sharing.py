"""What a copy of the model keeps of its sharing, judged on one target.

Two of the model's tensors can be one object (a tied parameter) or two objects over one storage
(a parameter made over another's memory, ``nn.Parameter(w)``). A module clone (torch's
``copy.deepcopy``) and a load are expected to keep that structure: the copy of a tied pair is one
tensor too, and a load writes into the tensors it finds. A checkpoint keeps which entries share
storage (``state_dict`` entries are views of the params, and ``torch.save`` saves shared storages
once), though its entries are objects of their own. Where the partition of those names by
identity, or by storage, differs before and after the op on one target, the op split (or joined)
what the model shared: an untied copy of a tied model trains twice as many weights
(pytorch#79788, a deepcopy; pytorch#188346, ``load_state_dict(assign=True)``).

This compares a target with itself, so it needs no second framework: a finding of kind
``sharing`` names one target twice (``targets = (target, target)``, as a metamorphic one does), its aspect (``identity`` or
``storage``) and what the op did (sides ``shared~split`` or ``distinct~joined``: before, then
after). Storage is compared only where the target names it (``Observation.storage``); identity
wherever both names have identity tokens.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import combinations

from harness.case import ops
from harness.case.ir import Program, per_program
from harness.judging import rules
from harness.judging.finding import Finding
from harness.targets.trace import Observation, Trace

#: The ops whose copy of the model is compared with the model: op kind -> whether the copy's
#: objects are the model's own structure (a clone, a load) or objects of their own (a
#: checkpoint's entries, whose storage sharing alone is kept).
COPIES = {"module_clone": True, "load": True, "save": False}


def _copied_names(program: Program, op: Mapping, state: Mapping[str, Observation]) -> dict[str, str]:
    """Model name -> the name that holds its copy after ``op``: ``<prefix>.<name>`` for a clone or
    a checkpoint, the name itself for a load (which writes into, or replaces, the model's slots)."""
    model = program.model_names
    if op.kind == "load":
        return {n: n for n in model}
    prefix = op.name
    return {n: f"{prefix}.{n}" for n in model if f"{prefix}.{n}" in state}


@per_program
def _copies_the_model(program: Program) -> bool:
    """Whether any op of ``program`` is one of ``COPIES`` (most programs have none)."""
    return any(op.kind in COPIES for op in program.ops)


def _together(before: Observation, other: Observation, aspect: str) -> bool | None:
    """Whether two observations are one object (``identity``) or over one storage (``storage``);
    None where a token is missing."""
    x, y = (before.identity, other.identity) if aspect == "identity" else (before.storage, other.storage)
    return None if x is None or y is None else x == y


def changes(program: Program, trace: Trace) -> list[Finding]:
    """The first op of each kind in ``COPIES`` whose copy splits or joins two of the model's
    names on ``trace``, per aspect (identity, storage)."""
    if not trace.ok or not _copies_the_model(program):
        return []
    found: dict[str, Finding] = {}
    for k, (op, step) in enumerate(zip(program.ops, trace.steps)):
        if op.kind not in COPIES or step.status != "ok":
            continue
        before, after = trace.state_after(k - 1), trace.state_after(k)
        copies = _copied_names(program, op, after)
        aspects = ("identity", "storage") if COPIES[op.kind] else ("storage",)
        for aspect in aspects:
            for p, q in combinations(sorted(copies), 2):
                if p not in before or q not in before:
                    continue
                was = _together(before[p], before[q], aspect)
                now = _together(after[copies[p]], after[copies[q]], aspect)
                if was is None or now is None or was == now:
                    continue
                f = Finding(
                    rule=rules.SHARING_CHANGES.name,
                    kind="sharing",
                    aspect=aspect,
                    targets=(trace.target, trace.target),
                    op_label=ops.label(op),
                    method=None,
                    sides=("shared", "split") if was else ("distinct", "joined"),
                    op_index=k,
                    subject=f"{p},{q}",
                    detail=(
                        f"{p} and {q} {'share' if was else 'do not share'} "
                        f"{'an object' if aspect == 'identity' else 'a storage'} before op {k};"
                        f" {copies[p]} and {copies[q]} {'share one' if now else 'do not'} after it."
                    ),
                )
                found.setdefault(f.signature, f)
                break
    return list(found.values())
