"""The fuzzing engine: Hypothesis generates programs, targets run them in batches, the oracle
turns traces into findings, and every new signature is shrunk to a 1-minimal case.

Generation and execution are decoupled: Hypothesis draws a chunk of programs (nothing runs while
it draws, so it works at its own speed), then the chunk runs on every target at once, pipelined.
Chunks are seeded from the campaign seed and the chunk number, so the same seed on the same
versions gives the same programs, in any number of workers and after a resume.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from hypothesis import HealthCheck, Phase, given, seed as hyp_seed, settings

from generators.programs import Profile, get_profile, programs as program_strategy

from .baseline import Baseline
from .ir import Program
from .minimize import MinimizeResult, minimize
from .oracle import Finding, compare
from .runner import Runner
from .trace import Trace


def chunk_seed(campaign_seed: int, chunk: int) -> int:
    digest = hashlib.sha256(f"aliasfuzz:{campaign_seed}:{chunk}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def generate(n: int, seed: int, profile: str | Profile = "default", max_ops: int | None = None) -> list[Program]:
    """Draws ``n`` programs with Hypothesis, deterministically for a given seed and version."""
    out: list[Program] = []
    strategy = program_strategy(get_profile(profile), max_ops)

    @settings(max_examples=n, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck), derandomize=False, report_multiple_bugs=False)
    @hyp_seed(seed)
    @given(strategy)
    def collect(program: Program) -> None:
        out.append(program)

    collect()
    return out[:n]


@dataclass
class Recorded:
    """A finding as a campaign keeps it: minimized, classified, timed."""

    finding: Finding  # as observed on the minimized case
    original: Program
    minimized: Program
    status: str  # new | known
    baseline: str | None
    seconds_to_find: float
    shrink: MinimizeResult | None

    @property
    def signature(self) -> str:
        return self.finding.signature


def _targets_for(finding: Finding, all_ids: Sequence[str]) -> list[str]:
    ids = [t for t in finding.targets if t in all_ids]
    if len(ids) == 1:  # a whole-program failure: compare against any other target
        ids += [t for t in all_ids if t != ids[0]][:1]
    return ids


@dataclass
class Engine:
    runner: Runner
    baseline: Baseline
    shrink_time_s: float = 60.0
    started: float = field(default_factory=time.monotonic)
    seen: set[str] = field(default_factory=set)
    programs_run: int = 0

    def check(self, programs: Sequence[Program]) -> list[tuple[Program, dict[str, Trace], list[Finding]]]:
        results = self.runner.run(programs)
        self.programs_run += len(programs)
        return [(p, traces, compare(p, traces)) for p, traces in zip(programs, results)]

    def predicate(self, signature: str, target_ids: Sequence[str]) -> Callable[[Sequence[Program]], list[bool]]:
        sub = self.runner.subset(target_ids)

        def shows(candidates: Sequence[Program]) -> list[bool]:
            out = []
            for program, traces in zip(candidates, sub.run(candidates)):
                out.append(any(f.signature == signature for f in compare(program, traces)))
            return out

        return shows

    def shrink(self, program: Program, finding: Finding) -> tuple[Program, Finding, MinimizeResult]:
        ids = _targets_for(finding, self.runner.ids)
        shows = self.predicate(finding.signature, ids)
        result = minimize(program, shows, time_limit_s=self.shrink_time_s)
        final = next((f for f in compare(result.program, self.runner.subset(ids).run_one(result.program))
                      if f.signature == finding.signature), finding)
        return result.program, final, result

    def process(self, programs: Sequence[Program], on_new: Callable[[Recorded], None],
                skip: Callable[[str], bool] = lambda s: False) -> int:
        """Runs a chunk; records and shrinks each signature not seen before. Returns how many
        programs showed any divergence."""
        divergent = 0
        for program, _traces, findings in self.check(programs):
            if findings:
                divergent += 1
            for f in findings:
                if f.signature in self.seen or skip(f.signature):
                    continue
                self.seen.add(f.signature)
                found_at = time.monotonic() - self.started
                minimized, final, result = self.shrink(program, f)
                entry = self.baseline.match(final)
                on_new(Recorded(final, program, minimized, "known" if entry else "new",
                                entry.id if entry else None, found_at, result))
        return divergent


def replay(engine: Engine, programs: Iterable[Program], on_new: Callable[[Recorded], None],
           skip: Callable[[str], bool] = lambda s: False) -> int:
    batch = list(programs)
    return engine.process(batch, on_new, skip) if batch else 0
