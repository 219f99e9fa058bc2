"""The upstream report draft of a finding: ``<stem>.issue.md`` beside its case.

It reads as an issue of the framework the finding is about (``filed_against``), shaped like the
reports that maintainers of candle, burn and PyTorch act on quickly: a title that names the call
and what it does, the reproducer first with what it prints, expected against observed with where
the expectation comes from, why it matters to a training loop, the versions, and the bisection
when one was run. The aliasfuzz case and the commands that replay it come last, for the person
filing it.

Where the expectation comes from depends on the finding's kind, and the draft says which:

- ``device``, ``variant``: the same framework on its other device or implementation;
- ``metamorphic``: the same target without ops that change nothing the program reads;
- ``sharing``: the same model before the op;
- any other: PyTorch, the reference framework, said as such. PyTorch's behaviour is no claim
  about another framework's documentation: the person filing checks that documentation first.

It is a draft for a person to check: a difference the framework documents is a design
difference for ``harness/baseline.toml``, not a bug report, and the draft says so.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from harness.case import ops
from harness.case.ir import Program
from harness.escaping import md_code, md_fence, md_text
from harness.judging.finding import FindingRecord
from harness.judging.pairs import REFERENCE_FRAMEWORK
from harness.targets.torch import COMPILE_VARIANTS

#: A title longer than this is cut at a word (GitHub shows about this much in a list).
TITLE_CHARS = 120

#: What each verdict of a snapshot means, as a phrase after "the snapshot".
_VERDICT_WORDS = {
    "follows": "follows the write",
    "keeps": "keeps its value",
    "rev follows": "carries a write back into its source",
    "rev keeps": "takes a write without changing its source",
    "rev other": "carries a write into its source, which then holds neither value",
    "none": "sees no change",
    "other": "holds neither value",
}

#: Why a divergence of each aspect matters to a training loop.
_WHY = {
    "verdict": (
        "Training code keeps copies of tensors: a best-weights snapshot, an EMA, a KV cache. Whether a copy "
        "follows later writes to its source decides whether the snapshot is a snapshot; when it silently "
        "follows (or silently does not), the saved weights or the cache are wrong and nothing errors."
    ),
    "value": (
        "The same training step gives other parameter values, with no error: a model ported from one "
        "framework (or moved to another device) trains to a different result."
    ),
    "status": (
        "Code written against the documented call stops with an error on one side only, so a port or a "
        "device change breaks a working training loop."
    ),
    "identity": (
        "Tied weights (an embedding shared with an output layer) and optimizer state are keyed by object: "
        "whether two names are one object decides whether they are trained as one parameter or as two."
    ),
    "storage": (
        "Tied weights and views share storage: a copy of the model that splits (or joins) them trains the "
        "copy differently from the original, and a checkpoint of it restores a different model."
    ),
    "draw": (
        "An incidental call changes what a lazily initialised parameter draws, so a seeded run is not "
        "reproducible once a harmless call is added or removed."
    ),
    "dtype": "A tensor changes its dtype on one side only, so later arithmetic differs or fails.",
    "version": (
        "Autograd refuses a backward pass over a tensor that an in-place write changed after the graph saved "
        "it, by its version counter. A write the counter does not show slips past that check: the backward "
        "pass runs with the new values and computes wrong gradients, with no error."
    ),
}

_METAMORPHIC_WHY = (
    "The ops left out (a mode round trip, a read, a copy nobody writes) change nothing a program reads, "
    "so a training loop's result should not depend on them. Here it does: adding a harmless call, for "
    "logging or evaluation, changes what training computes."
)


def filed_against(rec: FindingRecord) -> str:
    """The framework the draft is addressed to: the record's ``against`` when set (the reference,
    odd one out: ``hand_over.odd_one_out``), else the one that is not the reference (torch) when
    two frameworks differ, else the framework of the targets (two devices or variants of one)."""
    if rec.against:
        return rec.against
    frameworks = [t.split(":", 1)[0] for t in rec.targets if t and t != "-"]
    others = [f for f in frameworks if f != REFERENCE_FRAMEWORK]
    return others[0] if others else (frameworks[0] if frameworks else "?")


def _side_index(rec: FindingRecord, framework: str) -> int:
    """The index of the side the draft is about (its framework's), 0 when both are; between eager
    and compiled torch, the compiled side where the finding is about copy semantics or identity:
    AOTAutograd regenerates eager's aliasing of outputs to inputs by design, so a compiled
    function that returns another aliasing is the side that differs from what torch documents. For
    version counters, the side that kept one the other bumped: every in-place op bumps the counter
    of what it writes and of every view of it (the autograd notes), whichever mode fails to
    (eager torch's batch norm leaves its running statistics' counters, pytorch#13402)."""
    compiled = _compiled_side(rec)
    if compiled is not None and rec.aspect == "version" and sorted(rec.sides or ()) == ["bumped", "kept"]:
        return list(rec.sides).index("kept")
    if compiled is not None and rec.aspect in ("verdict", "identity"):
        return compiled
    for i, t in enumerate(rec.targets[:2]):
        if t.split(":", 1)[0] == framework:
            return i
    return 0


def _call(rec: FindingRecord) -> str:
    """The op as the title names it: a snapshot op by its method (``flip``), a step by its
    optimizer (``adamw`` step), any other by its label."""
    op = rec.op or "?"
    if op == "snapshot" and rec.method and not rec.method.startswith("+"):
        return f"`{rec.method}`"
    if op.startswith("step:"):
        return f"an `{op[5:]}` step" if op[5] in "aeiou" else f"a `{op[5:]}` step"
    return f"`{op}`"


def _made_by(program: Program | None, divergence: Mapping[str, Any] | None) -> str:
    """ ", on a tensor made by `expand`" when the divergent op reads a snapshot: what the input
    is matters to a maintainer (a strided view, a copy); empty when it is a declared tensor."""
    if program is None or not divergence:
        return ""
    index = divergence.get("op_index")
    if not isinstance(index, int) or not 0 <= index < len(program.ops):
        return ""
    source = ops.subject(program.ops[index])
    for op in reversed(program.ops[:index]):
        if op.kind == "snapshot" and op.name == source:
            return f" on a tensor made by `{op.method}`"
    return ""


def _first_line(text: str | None, limit: int = 70) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= limit else line[:limit].rsplit(" ", 1)[0] + " ..."


#: The keyword that picks each torch optimizer implementation a variant device runs.
_IMPL_KEYWORDS = {"plain": "foreach=False", "foreach": "foreach=True", "fused": "fused=True"}
#: torch's optimizer class of each ``step`` optimizer.
_OPTIMIZER_CLASSES = {"sgd": "SGD", "sgd_momentum": "SGD", "adam": "Adam", "adamw": "AdamW"}


def _compile_backend(target: str) -> str | None:
    """The ``torch.compile`` backend a torch target id's variant compiles with (``+compile``:
    ``aot_eager``, ``+inductor``: ``inductor``), or None for an eager one."""
    kwargs = COMPILE_VARIANTS.get(target.partition("+")[2])
    return kwargs["backend"] if kwargs else None


def _compiled_side(rec: FindingRecord) -> int | None:
    """Which side of a finding between two torch targets is the compiled one (``+compile``, ``+inductor``)."""
    if not all(t.startswith(f"{REFERENCE_FRAMEWORK}:") for t in rec.targets):
        return None
    compiled = [i for i, t in enumerate(rec.targets) if _compile_backend(t)]
    return compiled[0] if len(compiled) == 1 else None


def title(rec: FindingRecord, program: Program | None = None, divergence: Mapping[str, Any] | None = None) -> str:
    """The draft's title: the framework, the call, and what it does that it should not."""
    fw = filed_against(rec)
    i = _side_index(rec, fw)
    sides = tuple(rec.sides or ("?", "?"))
    mine, theirs = (sides[i], sides[1 - i]) if len(sides) == 2 else ("?", "?")
    other = rec.targets[1 - i] if len(rec.targets) == 2 else "the other side"
    call = _call(rec)
    if rec.kind == "metamorphic":
        group = "`, `".join(g for g in (rec.method or "+?").lstrip("+").split("+"))
        what = {
            "value": "the values",
            "status": "whether it runs",
            "identity": "object identity",
            "draw": "a lazy parameter's draw",
        }.get(rec.aspect or "", "the result")
        text = f"an inert `{group}` changes {what} of {call}"
    elif rec.kind == "sharing":
        what = "one object" if rec.aspect == "identity" else "one storage"
        verb = "splits" if sides[0] == "shared" else "joins"
        text = f"{call} {verb} parameters that were {what}"
    elif rec.kind == "version":
        text = f"{call} changes a tensor's values without bumping its version counter"
        if rec.method:
            text += f" (written through a `{rec.method}` of it)"
    elif rec.kind in ("device", "variant"):
        a, b = (t.split(":", 1)[-1] for t in rec.targets[:2])
        if rec.aspect == "verdict" and rec.method and not rec.method.startswith("+"):
            # copy semantics are the snapshot's: name its method
            call = f"a `{rec.method}` snapshot"
        elif rec.aspect == "version" and rec.method and not rec.method.startswith("+"):
            # the counter that differs is the one that relation made shared or its own
            call = f"a `{rec.method}`"
        what = {
            "value": "values",
            "status": "outcomes",
            "verdict": "copy semantics",
            "identity": "object identity",
            "dtype": "dtypes",
            "version": "version counters",
        }.get(rec.aspect or "", "results")
        keywords = [_IMPL_KEYWORDS.get(t.split("+", 1)[1] if "+" in t else "plain") for t in (a, b)]
        optimizer = _OPTIMIZER_CLASSES.get((rec.op or "").removeprefix("step:"))
        if rec.kind == "variant" and fw == REFERENCE_FRAMEWORK and optimizer and all(keywords):
            # The two implementations are keywords of one optimizer: name the class and them.
            text = f"`torch.optim.{optimizer}` gives different {what} with `{keywords[0]}` and `{keywords[1]}`"
        elif rec.kind == "variant" and fw == REFERENCE_FRAMEWORK and _compiled_side(rec) is not None:
            # Eager and compiled torch must agree: name the mode, not the device ids.
            backend = _compile_backend(rec.targets[_compiled_side(rec)])
            text = f"{call} gives different {what} in eager mode and under `torch.compile(backend={backend!r})`"
        else:
            text = f"{call} gives different {what} on `{a}` and `{b}`"
    elif rec.aspect == "status" and len(rec.targets) == 2 and _compiled_side(rec) is not None:
        # Eager against compiled torch: which mode fails is the news, not which target.
        compiled = _compiled_side(rec)
        mode = f"under `torch.compile` (`{_compile_backend(rec.targets[compiled])}`)"
        if sides[compiled] in ("error", "crash", "timeout"):
            # A backend's failure is "BackendCompilerFailed: backend='...' raised:", then its own.
            lines = [line.strip() for line in (rec.detail or "").splitlines() if line.strip()]
            if len(lines) > 1 and lines[0].endswith("raised:"):
                lines = lines[1:]
            reason = _first_line(lines[0] if lines else "")
            text = f"{call} fails {mode}, not in eager mode" + (f": {reason}" if reason else "")
        else:
            text = f"{call} runs {mode} where eager mode refuses it"
    elif rec.aspect == "status":
        if mine in ("error", "crash", "timeout"):
            text = f"{call} fails{_made_by(program, divergence)}"
            reason = _first_line(rec.detail)
            text += f": {reason}" if reason else f" ({other} runs it)"
        else:
            text = f"{call} runs{_made_by(program, divergence)} where {other} refuses it"
    elif rec.aspect == "verdict":
        text = f"a `{rec.method}` copy {_VERDICT_WORDS.get(mine, mine)} after {call} ({other}: {_VERDICT_WORDS.get(theirs, theirs)})"
    elif rec.aspect == "identity":
        text = f"after {call}, two names are {mine} objects ({other}: {theirs})"
    elif rec.aspect == "value":
        if (mine, theirs) == ("changed", "unchanged"):
            text = f"{call} moves a tensor that {other} leaves as it is"
        elif (mine, theirs) == ("unchanged", "changed"):
            text = f"{call} leaves a tensor as it is where {other} moves it"
        else:
            text = f"{call} gives other values than {other}"
    else:
        text = rec.sentence.strip() or "a divergence found by aliasfuzz"
    full = f"{fw}: {text}"
    return full if len(full) <= TITLE_CHARS else full[:TITLE_CHARS].rsplit(" ", 1)[0] + " ..."


def _what(side: str, value: str | None, aspect: str | None) -> str:
    words = _VERDICT_WORDS.get(side, side) if aspect == "verdict" else side
    return md_text(words) + (f" ({md_code(value)})" if value else "")


#: What a status says the op's call did, as a verb (the first paragraph of a status finding's draft).
_STATUS_VERBS = {"error": "fails", "ok": "runs", "unsupported": "has no call", "skipped": "is skipped"}


def summary(rec: FindingRecord, divergence: Mapping[str, Any] | None = None) -> str:
    """The draft's first paragraph: a status finding as "Op 1 (`flip`) fails on `candle:cpu` and
    runs on `torch:cpu`: <its error>", any other finding as the oracle's sentence."""
    index = (divergence or {}).get("op_index")
    if rec.aspect != "status" or index is None or len(rec.targets) != 2 or len(rec.sides or ()) != 2:
        return md_text(rec.sentence)
    (a, b), (sa, sb) = rec.targets, rec.sides
    said = (
        f"Op {index} ({_call(rec)}) {_STATUS_VERBS.get(sa, md_text(sa))} on {md_code(a)} and "
        f"{_STATUS_VERBS.get(sb, md_text(sb))} on {md_code(b)}"
    )
    detail = (rec.detail or "").strip().splitlines()
    return f"{said}: {md_text(detail[0])}" if detail else f"{said}."


#: What a status says of the op's call, in a draft's words.
_STATUS_WORDS = {
    "error": "the call fails",
    "ok": "the call runs",
    "unsupported": "the framework has no such call",
    "skipped": "the op is skipped (what it uses was never made)",
}


def _said(rec: FindingRecord, side: str, value: str | None, divergence: Mapping[str, Any] | None) -> str:
    """One side of a finding as a sentence about the case's names: ``w1`` holds ``[-0.3125]``
    after op 1; op 1 (`flip`): the call fails. Without the divergence's subject, the side's word."""
    d = divergence or {}
    subject, index = d.get("subject"), d.get("op_index")
    if rec.aspect == "status" and index is not None:
        return f"op {index} ({_call(rec)}): {_STATUS_WORDS.get(side, md_text(side))}"
    if rec.aspect == "value" and subject and value and index is not None and "," not in subject:
        return f"after op {index} ({_call(rec)}), {md_code(subject)} holds {md_code(value)} ({md_text(side)})"
    return _what(side, value, rec.aspect)


def expectation(rec: FindingRecord, divergence: Mapping[str, Any] | None = None) -> tuple[str, str, str, str, str]:
    """(observed side's label, its words, expected side's label, its words, where the
    expectation comes from) for the draft's "Expected and observed" section; ``divergence``, the
    finding's entry in its repro JSON, lets a side name the op and the tensor."""
    fw = filed_against(rec)
    targets = [t for t in rec.targets if t != "-"]
    sides = list(rec.sides or ("?", "?"))
    values = list(rec.values) if rec.values and len(rec.values) == 2 else [None, None]
    if rec.kind == "metamorphic" and targets:
        group = (rec.method or "+?").lstrip("+")
        agrees = {
            "with": f"{REFERENCE_FRAMEWORK} agrees with the run with them.",
            "without": f"{REFERENCE_FRAMEWORK} agrees with the run without them.",
            "both": f"{REFERENCE_FRAMEWORK} agrees with both.",
            "neither": f"{REFERENCE_FRAMEWORK} agrees with neither.",
        }.get(_agrees(rec), "")
        return (
            f"{md_code(targets[0])} with the inert `{md_text(group)}`",
            _what(sides[0], values[0], rec.aspect),
            f"{md_code(targets[0])} without it",
            _what(sides[1], values[1], rec.aspect),
            "the same target without the inert ops: they change nothing the program reads, so the two runs "
            f"should agree. {agrees}".strip(),
        )
    if rec.kind == "version" and targets:
        return (
            f"{md_code(targets[0])}",
            "the values changed, the version counter did not",
            "autograd",
            "every in-place write bumps the version counter of the tensors it changes",
            'the autograd mechanics notes, "In-place correctness checks": every tensor keeps a version '
            "counter that each in-place operation bumps, and a backward pass refuses a saved tensor whose "
            "counter moved. A write whose change the counter does not show passes that check silently.",
        )
    if rec.kind == "sharing" and targets:
        return (
            f"{md_code(targets[0])} after the op",
            _what(sides[1], values[1], rec.aspect),
            f"{md_code(targets[0])} before it",
            _what(sides[0], values[0], rec.aspect),
            "the model before the op: a copy, a save or a load of a model keeps which of its parameters are "
            "one object or one storage (`copy.deepcopy` keeps shared objects shared through its memo).",
        )
    i = _side_index(rec, fw) if len(targets) == 2 else 0
    j = 1 - i
    if len(targets) < 2:
        return (md_code(targets[0] if targets else "?"), _what(sides[0], values[0], rec.aspect), "-", "-", "-")
    if rec.kind == "device":
        source = (
            f"the same framework on another device ({md_code(targets[j])}): one program computes the same "
            "on every device, up to rounding."
        )
    elif rec.kind == "variant":
        source = (
            f"another implementation of the same call in the same framework ({md_code(targets[j])}), which "
            "should compute the same: implementations of one call differ in speed, not in result, up to rounding."
        )
    elif fw == REFERENCE_FRAMEWORK:
        source = (
            f"the other frameworks: {md_code(targets[j])}, and every other framework the case ran on, which "
            "agree with each other where PyTorch alone differs. Check PyTorch's documentation of the call "
            "before filing; a documented difference belongs in the aliasfuzz baseline instead."
        )
    else:
        source = (
            f"the reference framework, PyTorch ({md_code(targets[j])}). This is what PyTorch does, not a "
            f"statement of {md_text(fw)}'s documentation: check {md_text(fw)}'s documentation of the call "
            "before filing; a documented difference belongs in the aliasfuzz baseline instead."
        )
    return (
        md_code(targets[i]),
        _said(rec, sides[i], values[i], divergence),
        md_code(targets[j]),
        _said(rec, sides[j], values[j], divergence),
        source,
    )


def _agrees(rec: FindingRecord) -> str:
    """A metamorphic finding's agreement with the reference (the signature's last field)."""
    last = rec.signature.rsplit("|", 1)[-1]
    return last.split(":", 1)[1] if last.startswith("agrees:") else ""


def _versions(rec: FindingRecord) -> list[str]:
    if not rec.versions:
        return ["- (the run recorded no versions)"]
    return [
        f"- {md_code(target)}: " + md_text(", ".join(f"{k} {v}" for k, v in sorted(vs.items())))
        for target, vs in sorted(rec.versions.items())
    ]


def issue_markdown(
    rec: FindingRecord,
    case_path: str,
    case_text: str,
    reproducer: tuple[str, str, str] | None,
    *,
    program: Program | None = None,
    divergence: Mapping[str, Any] | None = None,
    output: str | None = None,
    bisection: str | None = None,
    checked: bool = False,
) -> str:
    """The draft of ``rec``, whose minimized case is ``case_text`` at ``case_path`` (relative to
    the draft). ``reproducer``: (its path, its code's language, its code) in the framework the
    draft is addressed to, or None when there is none; ``output``: what it prints, as the probe
    observed it; ``divergence``: the finding's entry in the case's repro JSON (its op index);
    ``bisection``: the ``aliasfuzz bisect`` table, when one was run; ``checked``: the reproducer
    checks the divergence and exits 1 while it shows."""
    seen, seen_words, wanted, wanted_words, source = expectation(rec, divergence)
    lines = [
        f"# {md_text(title(rec, program, divergence))}",
        "",
        f"> Draft by aliasfuzz from a minimized case (signature {md_code(rec.signature)}). Check it before filing: "
        "a difference the framework documents is a design difference for the aliasfuzz baseline, not a bug.",
        "",
        summary(rec, divergence),
    ]
    if reproducer is not None:
        path, language, code = reproducer
        lines += ["", f"## Reproducer ({md_code(path)})", "", *md_fence(code, language)]
        if output:
            lines += [
                "",
                "What it prints, in short (the values aliasfuzz's probe observed; after each op, the names that changed):",
                "",
                *md_fence(output),
            ]
        if checked:
            lines += [
                "",
                "It exits 1 while the divergence shows and 0 once it is gone, so it can serve as a regression test.",
            ]
    if rec.detail:
        lines += ["", "The error or detail, as reported:", "", *md_fence(rec.detail.strip())]
    lines += [
        "",
        "## Expected and observed",
        "",
        f"- Observed, on {seen}: {seen_words}.",
        f"- Expected, as on {wanted}: {wanted_words}.",
        f"- Where the expectation comes from: {source}",
        "",
        "## Why it matters",
        "",
        md_text(_METAMORPHIC_WHY if rec.kind == "metamorphic" else _WHY.get(rec.aspect or "", _WHY["value"])),
        "",
        "## Versions",
        *_versions(rec),
    ]
    if bisection:
        lines += ["", "## Bisection", "", *md_fence(bisection.strip())]
    lines += [
        "",
        f"## The minimized case ({rec.ops_after if rec.ops_after is not None else '?'} ops, aliasfuzz)",
        "",
        *md_fence(case_text, "toml"),
    ]
    # Shell words quoted: a path from the run folder is never a second command.
    # On the finding's own targets: an on-request one (``torch:cpu+inductor``) runs only where named.
    targets = ",".join(dict.fromkeys(rec.targets))
    commands = [f"aliasfuzz repro {shlex.quote(case_path)}" + (f" --targets {shlex.quote(targets)}" if targets else "")]
    if reproducer is not None:
        path = reproducer[0]
        commands.append(
            f"python {shlex.quote(path)}"
            if path.endswith(".py")
            else f"cd {shlex.quote(path.rsplit('/src/', 1)[0])} && cargo run"
        )
    lines += ["", "## To reproduce", "", *md_fence("\n".join(commands), "sh"), ""]
    return "\n".join(lines)
