"""Replaying one case on every target: ``run_case`` runs it and judges it, and ``ReproResult`` holds
the traces, the findings and their baseline status, with its JSON form (``repro.json``). Its
terminal table is ``harness.reporting.repro``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.case.inert import check_inert, without
from harness.case.ir import Program
from harness.fuzzing.baseline import Baseline, KnownDivergence
from harness.judging.finding import Finding
from harness.judging.harness_errors import harness_error, is_harness_error, safe_compare
from harness.judging.metamorphic import safe_compare_inert
from harness.judging.pairs import pairs
from harness.judging.verdicts import Verdict, verdicts
from harness.targets.base import TargetInfo
from harness.targets.runner import Runner
from harness.targets.trace import UNSUPPORTED, Trace


@dataclass
class ReproResult:
    program: Program
    infos: Mapping[str, TargetInfo]
    traces: Mapping[str, Trace]
    findings: list[Finding]
    known: dict[str, KnownDivergence | None] = field(default_factory=dict)  # signature -> entry
    #: signature -> the entry that would explain it but for the installed versions, and why
    #: (``Baseline.outside``): such a finding is new.
    outside: dict[str, str] = field(default_factory=dict)
    verdict_maps: dict[str, dict[str, Verdict]] = field(default_factory=dict)
    #: A metamorphic case (``program.inert``): every target's trace of the case without its group.
    without: Mapping[str, Trace] | None = None

    @property
    def new_findings(self) -> list[Finding]:
        return [f for f in self.findings if self.known.get(f.signature) is None]

    @property
    def harness_errors(self) -> list[Finding]:
        return [f for f in self.findings if is_harness_error(f)]

    @property
    def ran_nowhere(self) -> bool:
        """No target ran the program: "no divergence" would then be agreement of failures."""
        return not any(tr.ok for tr in self.traces.values())

    @property
    def ran_on(self) -> list[str]:
        """The targets that took the program (those that refused it whole are left out)."""
        return sorted(t for t, tr in self.traces.items() if tr.status != UNSUPPORTED)

    @property
    def compared(self) -> bool:
        """Whether anything was compared: two targets the oracle holds against each other took
        the case (``pairs``), a target's failure was held against the others (a finding), or, for
        a metamorphic case, a target ran it with and without its group. One target is no
        comparison: "no divergence" would then be agreement with nobody."""
        if self.ran_nowhere:
            return False
        return bool(self.program.inert) or bool(self.findings) or bool(pairs(self.ran_on))

    def not_compared(self) -> str:
        """Why nothing was compared, in words (for a result that is not ``compared``)."""
        if self.ran_nowhere:
            return "no target ran the case, so nothing was compared"
        if len(self.ran_on) == 1:
            return f"only {self.ran_on[0]} ran the case: one target is no comparison, so nothing was compared"
        return (
            f"no two of the targets that ran the case ({', '.join(self.ran_on)}) are compared with each other, "
            "so nothing was compared"
        )

    def to_json(self) -> dict[str, Any]:
        targets = {}
        for tid, tr in self.traces.items():
            info = self.infos.get(tid)
            targets[tid] = {
                "status": tr.status,
                "message": tr.message,
                "versions": dict(info.versions) if info else {},
                "final": {n: (None if o.value is None else o.value.tolist()) for n, o in tr.final.items()},
                "verdicts": {n: v.summary for n, v in self.verdict_maps[tid].items()},
                "events": {n: [e.label() for e in v.events] for n, v in self.verdict_maps[tid].items()},
                "ops": [{"status": s.status, **({"message": s.message} if s.message else {})} for s in tr.steps],
                "trace": tr.to_json()["trace"],
                "initial": tr.to_json()["initial"],
            }
        divergences = []
        for f in self.findings:
            entry = self.known.get(f.signature)
            divergences.append(
                {
                    **f.to_json(),
                    "status": "known" if entry else "new",
                    "baseline": entry.id if entry else None,
                    "outside_baseline": self.outside.get(f.signature),
                }
            )
        doc = {"title": self.program.title, "targets": targets, "divergences": divergences, "compared": self.compared}
        if self.without is not None:
            doc["without_inert"] = {
                "inert": list(self.program.inert),
                "targets": {
                    tid: {
                        "status": tr.status,
                        "message": tr.message,
                        "final": {n: (None if o.value is None else o.value.tolist()) for n, o in tr.final.items()},
                        "ops": [
                            {"status": st.status, **({"message": st.message} if st.message else {})} for st in tr.steps
                        ],
                        "initial": tr.to_json()["initial"],
                        "trace": tr.to_json()["trace"],
                    }
                    for tid, tr in self.without.items()
                },
            }
        return doc


def run_case(
    program: Program, runner: Runner, infos: Mapping[str, TargetInfo], baseline: Baseline | None = None
) -> ReproResult:
    """Runs ``program`` on every target and judges it. A bug of the oracle or of the verdicts is
    a harness-error finding in the result, never an exception."""
    traces = runner.run_one(program, every_target=True)
    findings = safe_compare(program, traces)
    result = ReproResult(program, infos, traces, findings)
    if program.inert:  # a metamorphic case: each target against itself without the group
        group = check_inert(program, program.inert)
        result.without = runner.run_one(without(program, group), every_target=True)
        findings.extend(safe_compare_inert(program, group, traces, result.without))
    try:
        result.verdict_maps = {t: verdicts(program, tr) for t, tr in traces.items()}
    except Exception as e:  # noqa: BLE001 - contained: the table then shows no verdicts
        result.verdict_maps = {t: {} for t in traces}
        error = harness_error(e, "verdicts")
        if all(f.signature != error.signature for f in findings):
            findings.append(error)
    if baseline is not None:
        result.known = {f.signature: None if is_harness_error(f) else baseline.match(f) for f in findings}
        result.outside = {
            f.signature: why for f in findings if not is_harness_error(f) and (why := baseline.outside(f)) is not None
        }
    return result
