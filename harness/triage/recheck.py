"""Re-checking root causes against the framework versions installed now.

Every baseline entry's case, and the latest minimized case of every root cause the triage store
holds that no entry names, is run on the targets present and judged as ``aliasfuzz repro`` judges
it. A baseline entry *still shows* when a finding of its case matches the entry, a store cause
when a finding has its signature; a case whose findings are all others *changed signature*; one
without findings *no longer shows* (fixed, or the case no longer reaches it); one that cannot be
read or run *cannot run*. Each result is recorded in the store with the targets' versions.

A cause whose targets are absent *cannot run*, never *no longer shows*: a baseline entry needs a
target of each framework it names (``frameworks``), a store cause the two targets of its
signature, and a case that fewer than two targets took (with no metamorphic group) compared
nothing (``ReproResult.compared``). Absent targets say nothing about a fix.

A result *changed* when it differs from the cause's previous recheck (a fix, a regression, another
signature), or, at a cause's first recheck, when its case does not show it: what a nightly run
fails on (``--fail-on-change``), next to new and regressed findings. *cannot run* is never a
change by itself: it says why, and the case is looked at, not the framework.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from harness.case.case_file import load_case
from harness.errors import InputError
from harness.fuzzing.replay import run_case
from harness.judging.finding import SELF_KINDS
from harness.judging.harness_errors import is_harness_error
from harness.judging.pairs import pairs
from harness.paths import ROOT
from harness.triage.store import TriageStore


@dataclass(frozen=True)
class Recheck:
    cause: str
    case: str | None
    result: str
    signatures: tuple[str, ...] = field(default=())
    note: str = ""
    previous: str | None = None  # the cause's result at its previous recheck (None: its first)

    @property
    def changed(self) -> bool:
        if self.result == "cannot run":
            return False
        if self.previous is None or self.previous == "cannot run":
            return self.result in ("no longer shows", "changed signature")
        return self.result != self.previous


def recheck(store: TriageStore, baseline, runner) -> list[Recheck]:
    """Rechecks every baseline entry and every store cause with a case, records each result in
    ``store``, and returns them (baseline entries first, in baseline order)."""

    versions = {t: dict(info.versions) for t, info in runner.infos.items()}
    installed = baseline.for_installed(runner.infos).installed
    entries = {e.id: e for e in baseline.entries}
    todo = [(e.id, str(ROOT / e.case), e.id) for e in baseline.entries]
    todo += [(c.id, store.latest_case(c.id), None) for c in store.causes() if c.id not in entries]
    present = sorted(runner.infos)
    out = []
    for cause, case, entry in todo:
        needs = _needs(cause, entries.get(entry))
        absent = _absent(needs, present)
        if case is None or not Path(case).is_file():
            out.append(Recheck(cause, case, "cannot run", note="no minimized case kept"))
        elif absent:
            out.append(
                Recheck(
                    cause,
                    case,
                    "cannot run",
                    note=f"needs {absent}, absent from the targets here ({', '.join(present) or 'none'})",
                )
            )
        else:
            try:
                result = run_case(load_case(case), runner, runner.infos, baseline)
            except InputError as e:
                out.append(Recheck(cause, case, "cannot run", note=str(e)))
            else:
                verdict = _judge(cause, case, entry, result, needs, _needs_a_pair(entries.get(entry)))
                out.append(_outside(verdict, entries.get(entry), result, installed))
        last = store.last_recheck(cause)
        out[-1] = replace(out[-1], previous=last[1] if last else None)
        store.record_recheck(
            cause, datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"), out[-1].result, versions, out[-1].signatures
        )
    return out


def _outside(r: Recheck, entry, result, installed) -> Recheck:
    """A baseline entry that still shows on installed versions outside its ``versions``: the note
    says so (``baseline.toml``'s range is then to be widened; a campaign reports its findings as
    new until it is)."""
    if entry is None or r.result != "still shows":
        return r
    why = next((w for f in result.findings if entry.matches(f) and (w := entry.outside(f, installed))), None)
    return r if why is None else replace(r, note=f"{why}: widen the entry's versions")


def _needs(cause: str, entry) -> tuple[str, ...]:
    """What a cause cannot be seen without: the frameworks a baseline entry names, or the two
    targets in a store cause's signature (``kind|a~b|...``; ``-`` is no target)."""
    if entry is not None:
        return tuple(sorted(set(entry.frameworks)))
    parts = cause.split("|")
    return tuple(sorted({t for t in parts[1].split("~") if t and t != "-"})) if len(parts) > 2 else ()


def _needs_a_pair(entry) -> bool:
    """Whether a baseline entry's findings need two targets held against each other: every kind
    but those of a target against itself (``SELF_KINDS``), which one target shows."""
    if entry is None:
        return False
    kinds = (entry.kind,) if isinstance(entry.kind, str) else tuple(entry.kind)
    return not all(k in SELF_KINDS for k in kinds)


def _absent(needs: tuple[str, ...], targets) -> str:
    """The frameworks or targets of ``needs`` that none of ``targets`` is, in words ("" when none)."""
    targets = list(targets)
    missing = [n for n in needs if not any(t == n or t.split(":", 1)[0] == n for t in targets)]
    return ", ".join(missing)


def _judge(
    cause: str, case: str, entry: str | None, result, needs: tuple[str, ...] = (), pair: bool = False
) -> Recheck:
    """``pair``: the cause needs two targets held against each other; where no two that took the
    case are, a target's findings against itself say nothing of it."""
    findings = [f for f in result.findings if not is_harness_error(f)]
    if len(findings) < len(result.findings):
        return Recheck(cause, case, "cannot run", note="a harness error (see `aliasfuzz repro`)")
    if not findings and result.ran_nowhere:
        return Recheck(cause, case, "cannot run", note="no target ran the case")
    refused = _absent(needs, result.ran_on)
    if refused:
        return Recheck(
            cause,
            case,
            "cannot run",
            note=f"needs {refused}, which did not take the case (it ran on {', '.join(result.ran_on)})",
        )
    if not result.compared or (pair and not result.program.inert and not pairs(result.ran_on)):
        return Recheck(cause, case, "cannot run", note=result.not_compared())
    signatures = tuple(sorted({f.signature for f in findings}))
    if entry is not None:
        shows = any((k := result.known.get(f.signature)) is not None and k.id == entry for f in findings)
    else:
        shows = cause in signatures
    verdict = "still shows" if shows else "changed signature" if findings else "no longer shows"
    return Recheck(cause, case, verdict, signatures)
