"""The upstream report draft of a new finding: ``<stem>.issue.md`` beside its case.

It reads as an issue of the framework the finding is about (``filed_against``): a title, the
versions each target ran, what was observed on each side, the minimized program as a case and in
that framework's own calls (its stand-alone reproducer), and the commands that replay it. It is
a draft for a person to check: whether a difference is a bug (a framework against its own
documentation, or two of its devices or backends apart) or a design difference (then it belongs
in ``harness/baseline.toml``, not upstream) is theirs to say, and the draft says so.

Only new findings get one: a known one already has its baseline entry, with its reason and
upstream reference.
"""

from __future__ import annotations

import shlex

from harness.escaping import md_code, md_fence, md_text
from harness.judging.finding import FindingRecord
from harness.judging.pairs import REFERENCE_FRAMEWORK

#: A title longer than this is cut at a word (GitHub shows about this much in a list).
TITLE_CHARS = 120


def filed_against(rec: FindingRecord) -> str:
    """The framework the draft is addressed to: the one that is not the reference (torch) when
    two frameworks differ, else the framework of the targets (two devices or variants of one)."""
    frameworks = [t.split(":", 1)[0] for t in rec.targets if t and t != "-"]
    others = [f for f in frameworks if f != REFERENCE_FRAMEWORK]
    return others[0] if others else (frameworks[0] if frameworks else "?")


def _title(framework: str, sentence: str) -> str:
    title = f"{framework}: {sentence.strip() or 'a divergence found by aliasfuzz'}"
    if len(title) <= TITLE_CHARS:
        return title
    return title[:TITLE_CHARS].rsplit(" ", 1)[0] + " ..."


def _versions(rec: FindingRecord) -> list[str]:
    if not rec.versions:
        return ["- (the run recorded no versions)"]
    return [f"- {md_code(target)}: " + md_text(", ".join(f"{k} {v}" for k, v in sorted(vs.items())))
            for target, vs in sorted(rec.versions.items())]


def _observed(rec: FindingRecord) -> list[str]:
    out = [md_text(rec.sentence)]
    pairs = [t for t in rec.targets if t != "-"]
    if rec.kind == "metamorphic" and len(pairs) == 2:  # one target, two runs
        pairs = [f"{pairs[0]}, with the inert ops", f"{pairs[0]}, without them"]
    if rec.kind == "sharing" and len(pairs) == 2:  # one target, before and after the op
        pairs = [f"{pairs[0]}, before the op", f"{pairs[0]}, after it"]
    if rec.sides and len(rec.sides) == len(pairs) == 2:
        got = [f"{md_code(t)}: {md_text(side)}" + (f" ({md_text(rec.values[i])})" if rec.values and len(rec.values) == 2 else "")
               for i, (t, side) in enumerate(zip(pairs, rec.sides))]
        out += ["", "Observed: " + "; ".join(got) + "."]
    if rec.detail:
        out += ["", *md_fence(rec.detail.strip())]
    return out


def issue_markdown(rec: FindingRecord, case_path: str, case_text: str,
                   reproducer: tuple[str, str, str] | None) -> str:
    """The draft of ``rec``, whose minimized case is ``case_text`` at ``case_path`` (relative to
    the run folder). ``reproducer``: (its path, its code's language, its code) in the framework
    the draft is addressed to, or None when there is none."""
    framework = filed_against(rec)
    kind = {"device": "two devices of one framework", "variant": "two implementations of one framework",
            "metamorphic": "one target against itself, with and without an inert op",
            "sharing": "one target against itself, before and after a copy of its model"}
    compared = kind.get(rec.kind, f"{framework} against {REFERENCE_FRAMEWORK}" if framework != REFERENCE_FRAMEWORK
                        else "two targets")
    lines = [
        f"# {md_text(_title(framework, rec.sentence))}",
        "",
        f"> Draft by aliasfuzz from a minimized case ({md_text(compared)}; signature {md_code(rec.signature)}). Check before "
        "filing: a difference the framework documents is a design difference for the aliasfuzz baseline, "
        "not a bug report.",
        "",
        "## Versions",
        *_versions(rec),
        "",
        "## What happens",
        *_observed(rec),
        "",
        f"## The program ({rec.ops_after if rec.ops_after is not None else '?'} ops)",
        "",
        *md_fence(case_text, "toml"),
    ]
    if reproducer is not None:
        path, language, code = reproducer
        lines += ["", f"## In {md_text(framework)}'s own calls ({md_code(path)})", "", *md_fence(code, language)]
    # Shell words quoted: a path from the run folder is never a second command.
    commands = [f"aliasfuzz repro {shlex.quote(case_path)}"]
    if reproducer is not None:
        path = reproducer[0]
        commands.append(f"python {shlex.quote(path)}" if path.endswith(".py")
                        else f"cd {shlex.quote(path.rsplit('/src/', 1)[0])} && cargo run")
    lines += ["", "## To reproduce", "", *md_fence("\n".join(commands), "sh"), ""]
    return "\n".join(lines)
