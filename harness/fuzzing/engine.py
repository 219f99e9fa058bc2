"""The fuzzing engine: Hypothesis generates programs, targets run them in batches, the oracle
turns traces into findings, and every new signature is shrunk to a 1-minimal case.

Generation and execution are decoupled: Hypothesis draws a chunk of programs
(``generation.generate``; nothing runs while it draws, so it works at its own speed), then the chunk runs on every target at once, pipelined.
Chunks are seeded from the campaign seed and the chunk number, so the same seed on the same
versions gives the same programs, in any number of workers and after a resume.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis.database import ExampleDatabase, choices_to_bytes
from hypothesis.errors import HypothesisException

from generators.programs import Profile, get_profile
from generators.programs import programs as program_strategy
from harness.case.ir import Program
from harness.collector import long_lived_heap
from harness.errors import InputError
from harness.fuzzing import variants
from harness.fuzzing.baseline import Baseline, KnownDivergence
from harness.fuzzing.generation import Drawer, generate
from harness.judging.finding import Finding
from harness.judging.harness_errors import harness_error, is_harness_error, safe_compare
from harness.judging.metamorphic import group_label
from harness.judging.pairs import reference_target, split_target_id
from harness.shrinking.minimize import MinimizeResult, cost, minimize
from harness.targets.base import CANCELLED
from harness.targets.runner import Runner
from harness.targets.trace import Trace


def chunk_seed(campaign_seed: int, chunk: int) -> int:
    digest = hashlib.sha256(f"aliasfuzz:{campaign_seed}:{chunk}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


class _OneExample(ExampleDatabase):
    """An example database holding one example: Hypothesis's reuse phase replays it, finds that
    it fails, and its shrinker takes over from there. It is served from the *secondary* corpus:
    an interesting example from the primary corpus counts as already shrunk and is not shrunk
    again."""

    def __init__(self, blob: bytes):
        super().__init__()
        self.blob = blob

    def fetch(self, key: bytes):
        if key.endswith(b".secondary"):
            yield self.blob

    def save(self, key: bytes, value: bytes) -> None:
        pass

    def delete(self, key: bytes, value: bytes) -> None:
        pass


class _Shows(Exception):
    pass


def hypothesis_shrink(
    program: Program,
    choices: tuple,
    profile: str | Profile,
    max_ops: int | None,
    shows: Callable[[Sequence[Program]], list[bool]],
    time_limit_s: float,
) -> tuple[Program, int]:
    """Hypothesis's shrinker on a generated finding: the program Hypothesis drew from
    ``choices`` is replayed and shrunk by deleting and simplifying choices. Returns the smallest
    program (by ``minimize.cost``) that still shows, and the number of runs."""
    best = [program]
    runs = [0]
    deadline = time.monotonic() + time_limit_s

    @settings(
        database=_OneExample(choices_to_bytes(choices)),
        phases=[Phase.reuse, Phase.shrink],
        max_examples=1,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
        verbosity=Verbosity.quiet,
        print_blob=False,
    )
    @given(program_strategy(get_profile(profile), max_ops))
    def still_shows(candidate: Program) -> None:
        if time.monotonic() > deadline:
            return  # out of time: nothing shows any more, so Hypothesis stops shrinking
        runs[0] += 1
        if shows([candidate])[0]:
            if cost(candidate) < cost(best[0]):
                best[0] = candidate
            raise _Shows()

    try:
        still_shows()
    except _Shows:
        pass
    except HypothesisException:  # Flaky after the deadline, or a health complaint: keep the best
        pass  # (any other exception is a bug of aliasfuzz, and the engine reports it as one)
    return best[0], runs[0]


@dataclass
class Recorded:
    """A finding as a campaign keeps it: minimized, classified, timed."""

    finding: Finding  # as observed on the minimized case
    original: Program
    minimized: Program
    status: str  # new | flaky | known
    baseline: str | None
    seconds_to_find: float
    shrink: MinimizeResult | None
    #: (runs that showed it, runs) of its confirmation on fresh processes (``Engine.confirm``);
    #: None when it was not confirmed (a known finding, no confirmation runs, past the deadline).
    confirmed: tuple[int, int] | None = None

    @property
    def signature(self) -> str:
        return self.finding.signature


def _judged(
    programs: Sequence[Program], results: Sequence[dict[str, Trace]]
) -> list[tuple[Program, dict[str, Trace], list[Finding]]]:
    """Each program with its traces and the oracle's findings (an exception of the oracle is a
    harness-error finding: ``harness_errors.safe_compare``). A program that a cancellation or the
    runner's deadline cut off on some target is left out: it was not run, so it is not judged."""
    return [(p, traces, safe_compare(p, traces)) for p, traces in zip(programs, results) if not cancelled(traces)]


def cancelled(traces: dict[str, Trace]) -> bool:
    return any(t.status == CANCELLED for t in traces.values())


def drawn_results(results: Sequence[tuple[Program, dict[str, Trace], list[Finding]]]) -> int:
    """How many of ``Engine.judge``'s entries are drawn programs (a metamorphic pair's program
    carries its ``inert`` group; a drawn one never does)."""
    return sum(1 for program, _, _ in results if not program.inert)


def findings_on(run: variants.RunFn, programs: Sequence[Program], finding: Finding) -> list[list[Finding]]:
    """Each program's findings of ``finding``'s oracle, on ``run``'s targets: the metamorphic
    pairs of its inert groups of that label for a metamorphic finding, else the differential
    oracle's (``safe_compare``)."""
    label = group_label(finding)
    if label is not None:
        return variants.pair_findings(programs, run, label)
    return [safe_compare(p, traces) for p, traces in zip(programs, run(programs))]


def known_entry(baseline: Baseline, finding: Finding) -> KnownDivergence | None:
    """The baseline entry that explains ``finding``; never one for a harness error, which is a
    bug of aliasfuzz whatever an entry's patterns say."""
    return None if is_harness_error(finding) else baseline.match(finding)


def _targets_for(finding: Finding, all_ids: Sequence[str]) -> list[str]:
    """The targets a finding is shrunk on. A whole-program failure needs a partner that runs the
    program cleanly: another framework's primary target if there is one (the failing
    framework's other devices and variants likely fail alike, and a variant is not sent programs
    without an op it differs on), else any other target."""
    if is_harness_error(finding):  # the exception may come from any target's trace
        return list(all_ids)
    ids = list(dict.fromkeys(t for t in finding.targets if t in all_ids))
    if group_label(finding) is not None:
        # A target against itself: no partner, but the reference target that its agreement
        # (part of the signature) was read from.
        ref = reference_target(ids[0], all_ids) if ids and finding.agrees is not None else None
        return ids + [ref] if ref is not None else ids
    if len(ids) == 1:
        framework = split_target_id(ids[0])[0]

        def preference(t: str) -> tuple[bool, bool]:
            fw, device, base = split_target_id(t)
            return fw == framework, device != base

        ids += sorted((t for t in all_ids if t != ids[0]), key=preference)[:1]  # stable: runner order
    return ids


#: How many program hashes an engine remembers before it starts afresh (about 4 MiB).
RAN_LIMIT = 1 << 16


@dataclass
class Engine:
    runner: Runner
    baseline: Baseline
    shrink_time_s: float = 30.0
    started: float = field(default_factory=time.monotonic)
    seen: set[str] = field(default_factory=set)
    programs_run: int = 0
    profile: str = "default"
    max_ops: int | None = None
    #: Program key -> Hypothesis choice sequence, for programs generated in this engine.
    choices: dict[str, tuple] = field(default_factory=dict)
    #: How chunks are drawn (``generation.generate``; ``generate_given`` to compare against).
    drawer: Drawer = generate
    #: Share of the shrink time given to Hypothesis's shrinker before the domain pass.
    hypothesis_share: float = 0.3
    #: Wall-clock time (``time.time()``) after which nothing is shrunk any more: a finding found
    #: at the end of a budget is recorded as found, with ``complete = False``.
    deadline: float | None = None
    #: Hashes of the programs ``pipeline`` has run (see ``unseen``), and how many it skipped.
    ran: set[int] = field(default_factory=set)
    repeats_skipped: int = 0
    #: Programs that no target ran cleanly (every trace a failure): nothing was compared, so
    #: they are not agreement, and a campaign says how many there were.
    ran_nowhere: int = 0
    #: Whether findings the baseline already knows are shrunk too. A campaign leaves them as
    #: found: each baseline entry names a minimal case of its own, and shrinking every known
    #: finding took over 90% of a 2-minute campaign.
    shrink_known: bool = True
    #: How many times a new finding's minimized case is re-run on freshly started target
    #: processes before it is reported: one that does not show every time is ``flaky``.
    confirm_runs: int = 3
    #: Share of each chunk's programs run beside a metamorphic variant (``variants.plan``), and
    #: how many such variants ran.
    metamorphic_share: float = 0.25
    variants_run: int = 0
    #: Per target id, ``[programs, microseconds]``: the drawn programs it gave a trace of
    #: (cancelled ones left out) and the time its process spent running them (``elapsed_us``),
    #: since the campaign last took them: what each target costs a campaign.
    target_costs: dict[str, list[int]] = field(default_factory=dict)

    def generate(self, n: int, seed: int) -> list[Program]:
        """A chunk of programs; their choice sequences are kept until ``forget``."""
        return self.drawer(n, seed, self.profile, self.max_ops, choices=self.choices)

    def forget(self, programs: Iterable[Program]) -> None:
        for p in programs:
            self.choices.pop(p.key(), None)

    def unseen(self, programs: Sequence[Program]) -> list[Program]:
        """``programs`` without those this engine has run before (or that repeat within the
        chunk): a target gives the same trace for the same program, so running it again finds
        nothing. Random draws seldom repeat a program (none in 2,560 of the default profile);
        ``generate_given`` repeats about one in eleven, as every ``@given`` run opens with the
        same simplest examples. The memory is bounded: after ``RAN_LIMIT`` programs it starts
        afresh."""
        if len(self.ran) > RAN_LIMIT:
            self.ran.clear()
        out, kept = [], set()
        for p in programs:
            key = p.key()
            h = hash(key)
            if h in self.ran:
                self.repeats_skipped += 1
                if h not in kept:
                    self.choices.pop(key, None)  # recorded by ``generate``; nothing would forget it
                continue
            self.ran.add(h)
            kept.add(h)
            out.append(p)
        return out

    def check(self, programs: Sequence[Program]) -> list[tuple[Program, dict[str, Trace], list[Finding]]]:
        batch, pairs = self.plan(programs)
        return self.judge(programs, pairs, self.runner.run(batch, shares=self.target_shares))

    @property
    def target_shares(self) -> dict[str, float]:
        """The share of programs each costly target runs (the profile's ``target_shares``)."""
        return dict(get_profile(self.profile).target_shares)

    def plan(self, programs: Sequence[Program]) -> tuple[list[Program], list[variants.Pair]]:
        """The batch that runs ``programs``: them, then their metamorphic variants."""
        return variants.plan(programs, self.metamorphic_share)

    def judge(
        self, programs: Sequence[Program], pairs: Sequence[variants.Pair], results: Sequence[dict[str, Trace]]
    ) -> list[tuple[Program, dict[str, Trace], list[Finding]]]:
        """The drawn programs judged by the differential oracle, then the metamorphic pairs that
        diverged (their programs carry ``inert``: ``drawn_results`` tells the two apart)."""
        judged = _judged(programs, results[: len(programs)])
        self._count(judged)
        self.variants_run += sum(1 for p in pairs if p.extra < len(results) and not cancelled(results[p.extra]))
        return judged + variants.judge(pairs, results, cancelled)

    def _count(self, judged: Sequence[tuple[Program, dict[str, Trace], list[Finding]]]) -> None:
        self.programs_run += len(judged)
        self.ran_nowhere += sum(1 for _, traces, _ in judged if not any(t.ok for t in traces.values()))
        for _, traces, _ in judged:
            for tid, trace in traces.items():
                if trace.status != CANCELLED:
                    cost = self.target_costs.setdefault(tid, [0, 0])
                    cost[0] += 1
                    cost[1] += trace.elapsed_us

    def predicate(self, finding: Finding, target_ids: Sequence[str]) -> Callable[[Sequence[Program]], list[bool]]:
        sub = self.runner.subset(target_ids)

        def shows(candidates: Sequence[Program]) -> list[bool]:
            return [
                any(f.signature == finding.signature for f in fs) for fs in findings_on(sub.run, candidates, finding)
            ]

        return shows

    def shrink(self, program: Program, finding: Finding) -> tuple[Program, Finding, MinimizeResult]:
        """Hypothesis's shrinker first (when the program was generated here), then the domain
        pass, which also guarantees 1-minimality."""
        ids = _targets_for(finding, self.runner.ids)
        shows = self.predicate(finding, ids)
        start = time.monotonic()
        limit = self.shrink_time_s
        if self.deadline is not None:  # the campaign's budget bounds shrinking too
            limit = min(limit, self.deadline - time.time())
        if limit < 1.0:
            return program, finding, MinimizeResult(program, len(program.ops), len(program.ops), 0, 0.0, False)
        choices = self.choices.get(program.key())
        hyp_runs = 0
        start_from = program
        if choices is not None:
            start_from, hyp_runs = hypothesis_shrink(
                program, choices, self.profile, self.max_ops, shows, limit * self.hypothesis_share
            )
        remaining = max(0.5, limit - (time.monotonic() - start))
        result = minimize(start_from, shows, time_limit_s=remaining)
        result.ops_before = len(program.ops)
        result.runs += hyp_runs
        result.hypothesis_runs = hyp_runs
        result.seconds = time.monotonic() - start
        shown = findings_on(self.runner.subset(ids).run, [result.program], finding)[0]
        final = next((f for f in shown if f.signature == finding.signature), None)
        if final is None:
            # The minimized program showed it to the shrinker but not on this run: the divergence
            # depends on more than the program (what the process ran before, timing). The case is
            # then the program as found, which showed it and whose op indices the finding's
            # (``inert``, ``at``) are; confirmation on fresh processes says whether it is flaky.
            result.program, result.ops_after, result.kept_as_found = program, len(program.ops), True
            return program, finding, result
        # A metamorphic case names its inert group, found again in the minimized program.
        minimized = replace(result.program, inert=final.inert) if group_label(final) else result.program
        return minimized, final, result

    def process(
        self,
        programs: Sequence[Program],
        on_new: Callable[[Recorded], None],
        skip: Callable[[str], bool] = lambda s: False,
    ) -> int:
        """Runs a chunk; records and shrinks each signature not seen before. Returns how many
        programs showed any divergence."""
        return self.record(self.check(programs), on_new, skip)

    def record(
        self,
        results: Iterable[tuple[Program, dict[str, Trace], list[Finding]]],
        on_new: Callable[[Recorded], None],
        skip: Callable[[str], bool] = lambda s: False,
    ) -> int:
        """Shrinks and reports each signature not seen before, those the baseline does not know
        first (a short budget goes to what the user has not seen); a known one is reported
        unshrunk unless ``shrink_known``. Returns how many programs showed any divergence."""
        divergent = 0
        pending = []
        for program, _traces, findings in results:
            if findings:
                divergent += 1
            for f in findings:
                if f.signature in self.seen or skip(f.signature):
                    continue
                self.seen.add(f.signature)
                pending.append((program, f, known_entry(self.baseline, f), time.monotonic() - self.started))
        for program, f, entry, found_at in sorted(pending, key=lambda p: p[2] is not None):
            if entry is not None and not self.shrink_known:
                self._report(on_new, Recorded(f, program, program, "known", entry.id, found_at, None))
                continue
            try:
                minimized, final, result = self.shrink(program, f)
            except InputError:
                raise
            except Exception as e:  # a bug of the shrinker: the finding stands unshrunk, and so does the bug
                self._report(
                    on_new,
                    Recorded(
                        f, program, program, "known" if entry else "new", entry.id if entry else None, found_at, None
                    ),
                )
                self._report_harness_error(e, "shrink", program, found_at, on_new)
                continue
            entry = known_entry(self.baseline, final)
            try:
                confirmed = None if entry else self.confirm(minimized, final)
            except InputError:
                raise
            except Exception as e:  # a bug of the confirmation: the finding stands unconfirmed, and so does the bug
                confirmed = None
                self._report_harness_error(e, "confirm", minimized, found_at, on_new)
            status = "known" if entry else "flaky" if confirmed and confirmed[0] < confirmed[1] else "new"
            self._report(
                on_new,
                Recorded(final, program, minimized, status, entry.id if entry else None, found_at, result, confirmed),
            )
        return divergent

    def confirm(self, program: Program, finding: Finding) -> tuple[int, int] | None:
        """Runs ``program`` ``confirm_runs`` times, each on freshly started processes of the
        finding's targets, and returns (how many runs showed its signature, runs); None when there
        are no runs to make or the campaign's deadline has passed (it stays ``new``, unconfirmed).
        Like libFuzzer's and ClusterFuzz's re-run of a crash before calling it reliable: a
        divergence that depends on what a process ran before (its allocator, a framework's
        cache) or on timing is ``flaky``, not a finding of the program."""
        if self.confirm_runs <= 0 or (self.deadline is not None and time.time() >= self.deadline):
            return None
        sub = self.runner.subset(_targets_for(finding, self.runner.ids))
        shown = 0
        for _ in range(self.confirm_runs):
            sub.restart()
            shown += any(f.signature == finding.signature for f in findings_on(sub.run, [program], finding)[0])
        return shown, self.confirm_runs

    def _report(self, on_new: Callable[[Recorded], None], rec: Recorded) -> None:
        """``on_new(rec)``; an exception of the recording code (not a set-up problem such as a
        full disk, which ends the campaign with one line) becomes a harness error of its own."""
        try:
            on_new(rec)
        except InputError:
            raise
        except Exception as e:
            if is_harness_error(rec.finding):
                raise  # recording a harness error failed: nothing smaller is left to record
            self._report_harness_error(e, "record", rec.original, rec.seconds_to_find, on_new)

    def _report_harness_error(
        self, exc: Exception, stage: str, program: Program, found_at: float, on_new: Callable[[Recorded], None]
    ) -> None:
        f = harness_error(exc, stage)
        if f.signature in self.seen:
            return
        self.seen.add(f.signature)
        self._report(on_new, Recorded(f, program, program, "new", None, found_at, None))


def pipeline(engine: Engine, chunks: Iterable[Sequence[Program]]):
    """``Engine.check`` over a lazy stream of chunks, less the programs the engine has run before
    (``Engine.unseen``: a chunk may come out shorter, or empty), keeping the targets busy: while
    the targets run chunk k, the chunks up to k + ``PIPELINE_AHEAD`` are drawn (the iterator's
    work: Hypothesis) and queued on every target before the oracle compares chunk k, so each
    target goes on to the next as soon as it is done with one. Yields ``(programs, check
    results)`` per chunk, in order (fewer results than programs when some were cancelled). The
    consumer may use the targets while it holds a chunk (to shrink a finding): its programs run
    after the chunks queued, whose traces stay with this pipeline."""
    with long_lived_heap():  # a chunk's traces are thousands of short-lived objects
        yield from _pipeline(engine, chunks, PIPELINE_AHEAD)


#: Chunks queued on the targets behind the one they run. With one, a target that finishes its
#: chunk before the worker has drawn the next (a slow draw, a slow judgement) waits; with two,
#: ``aliasfuzz bench``'s engine keeps 1.79-1.80 of the two cores busy where one kept 1.71-1.79.
PIPELINE_AHEAD = 2


def _pipeline(engine: Engine, chunks: Iterable[Sequence[Program]], ahead: int):
    it = ((chunk, *engine.plan(chunk)) for chunk in (engine.unseen(c) for c in chunks))
    queued: collections.deque = collections.deque()  # ((programs, batch, pairs), wait), in order
    more = True
    try:
        while True:
            # Drawn while the targets run the chunks queued before, and queued behind them on
            # each target, which starts on it as soon as it is done with those: no target waits
            # for the slowest one, or for the oracle.
            while more and len(queued) <= ahead:
                following = next(it, None)
                more = following is not None
                if more:
                    queued.append((following, engine.runner.submit(following[1], shares=engine.target_shares)))
            if not queued:
                return
            (programs, _batch, pairs), wait = queued.popleft()
            results = wait()
            yield programs, engine.judge(programs, pairs, results)
    except GeneratorExit:
        # The consumer stopped early (a campaign's budget ran out): it leaves no batch running.
        # Not on an interrupt or an error, where the caller cancels or closes the runner: a hung
        # target would hold this wait until its timeout.
        for _, wait in queued:
            with contextlib.suppress(Exception):  # their traces are dropped
                wait()
        raise
