"""Campaigns: a budgeted fuzzing run that streams findings to a run folder and can be resumed.

Run folder layout (all writes are atomic or append-only, so a campaign killed at any moment loses
nothing it already reported; ``run_folder.RunFolder`` owns it):

- ``campaign.json``: configuration, versions, machine, progress (rewritten atomically);
- ``findings.jsonl``: one line per finding, appended and fsync'ed as it is found (the journal);
- ``findings.json``: the same findings as one JSON list (rewritten atomically after each one);
- ``cases/NNN-<hash>.toml``: the minimized case of each finding (``aliasfuzz repro`` replays it),
  ``.original.toml`` the program it was found in, ``.json`` the repro result on every target;
- ``corpus/``: the Hypothesis example database, unless ``--db`` points elsewhere.

Workers: ``--workers N`` starts N processes, each with its own targets; they claim chunks from a
shared counter, so the chunk -> programs mapping stays fixed by the seed whatever N is. A worker
tells the driver what it learns with the messages of ``harness.fuzzing.messages``. With
``--campaign NAME`` the counter, the signatures and the findings are shared by many machines in
Redis (``harness.fuzzing.shared_campaign``).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import platform
import queue as queue_mod
import re
import signal
import time
import typing
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from harness.case.case_file import dump_case
from harness.case.ir import Program
from harness.errors import CampaignError, InputError
from harness.fuzzing.baseline import load_baseline
from harness.fuzzing.corpus import Corpus, open_database
from harness.fuzzing.engine import Engine, Recorded, cancelled, chunk_seed, drawn_results, pipeline
from harness.fuzzing.messages import (
    FindingFound,
    LogLine,
    Message,
    Progress,
    RanNowhere,
    TargetCosts,
    TargetsOpened,
    WorkerDone,
    WorkerError,
)
from harness.fuzzing.options import option_problem
from harness.fuzzing.replay import run_case
from harness.fuzzing.run_folder import RunFolder, program_from_bytes, program_to_bytes
from harness.fuzzing.shared_campaign import LEASE_S, joined
from harness.judging.finding import FindingRecord
from harness.judging.harness_errors import HARNESS_ERROR, line_of
from harness.targets.registry import open_runner

__all__ = [
    "DRAIN_S",
    "CampaignConfig",
    "CampaignError",
    "CampaignResult",
    "RunFolder",
    "machine_info",
    "parse_duration",
    "run_campaign",
    "usable_cpus",
    "worker_loop",
]


def parse_duration(text: str | None) -> float | None:
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", str(text))
    if not m:
        raise CampaignError(f"--budget: {text!r} is not a duration like 90s, 10m, 2h")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, which a container or ``taskset`` narrows;
    ``os.cpu_count`` counts the whole machine's)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # no affinity on this system
        return os.cpu_count() or 1


@dataclass
class CampaignConfig:
    out: str
    seed: int
    budget_s: float | None = None
    max_programs: int | None = None
    targets: list[str] | None = None
    profile: str = "default"
    workers: int = 1
    db: str | None = None
    chunk_size: int = 64
    shrink_time_s: float = 30.0
    baseline: str | None = None
    # The budget bounds drawing programs; findings still unshrunk when it runs out may be shrunk
    # for this much longer, so a short campaign's last chunk is not reported unshrunk.
    shrink_grace_s: float = 0.0
    # Known findings (the baseline matches them) are reported as found, not shrunk: the
    # baseline entry's own case is their minimal form (Engine.shrink_known).
    shrink_known: bool = False
    # A new finding's minimized case is re-run this many times on fresh target processes; one
    # that does not show every time is reported `flaky` (Engine.confirm). 0: not confirmed.
    confirm_runs: int = 3
    # The share of each chunk's programs also run beside a variant with one inert op group more
    # or less, each target compared with itself (kind `metamorphic`; variants.plan). 0: off.
    metamorphic_share: float = 0.25
    # One campaign over many machines: its name in Redis (``--db`` names the server) and how long
    # a claimed chunk stays this machine's without a renewal (``shared_campaign``).
    campaign: str | None = None
    lease_s: float = LEASE_S

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        if self.campaign is None:  # a campaign of one machine: campaign.json as it has always been
            del doc["campaign"], doc["lease_s"]
        return doc


# ------------------------------------------------------------------------------------------------
# The worker loop (in-process for one worker, one process each for several).


def _titled(program: Program, title: str, meta: dict[str, Any]) -> Program:
    return replace(program, title=title, meta=meta)


#: How long the chunks under way when the budget and the shrink grace end may still take before
#: the runner cuts its waits: long enough for responsive targets to finish a chunk, short enough
#: that a hung probe cannot hold a campaign past its budget for long.
DRAIN_S = 10.0


def worker_loop(
    config: CampaignConfig,
    worker: int,
    claim: Callable[[], int | None],
    emit: Callable[[Message], None],
    known: Callable[[str], bool],
    elapsed_before: float,
    replay_programs: list[Program],
    deadline: float | None = None,
) -> None:
    """Opens targets, replays the corpus share, then processes claimed chunks until ``claim``
    returns None. Everything it learns goes out through ``emit`` (``messages``). ``deadline``
    (``time.time()``) bounds shrinking: the budget's end plus the shrink grace. With
    ``config.campaign``, chunks and signatures are claimed in Redis (``shared_campaign.joined``)."""
    if config.campaign:
        with joined(config, claim, emit, known) as (claim, emit, known, again):
            _worker_loop(config, claim, emit, known, elapsed_before, replay_programs, deadline, again)
        return
    _worker_loop(config, claim, emit, known, elapsed_before, replay_programs, deadline)


def _worker_loop(
    config: CampaignConfig,
    claim: Callable[[], int | None],
    emit: Callable[[Message], None],
    known: Callable[[str], bool],
    elapsed_before: float,
    replay_programs: list[Program],
    deadline: float | None,
    again: Callable[[], bool] = lambda: False,
) -> None:

    baseline = load_baseline(config.baseline)
    # Past the deadline (and a drain), whatever a target is doing (a hung probe) is cut off, its
    # start-up too: a probe that never answers its handshake must not hold a budgeted campaign
    # for the two minutes a slow one is otherwise given.
    cut_off = None if deadline is None else time.monotonic() + max(0.0, deadline - time.time()) + DRAIN_S
    runner, found = open_runner(config.targets, start_by=cut_off)
    if cut_off is not None:
        runner.set_deadline(cut_off)
    infos = runner.infos
    versions = {tid: dict(info.versions) for tid, info in infos.items()}
    baseline = baseline.for_installed(infos)  # an entry explains findings only on its versions
    engine = Engine(
        runner,
        baseline,
        shrink_time_s=config.shrink_time_s,
        profile=config.profile,
        deadline=deadline,
        shrink_known=config.shrink_known,
        confirm_runs=config.confirm_runs,
        metamorphic_share=config.metamorphic_share,
    )
    baseline_cases = {e.id: e.case for e in baseline.entries}
    engine.started -= elapsed_before
    emit(TargetsOpened({t.id: t.info.to_json() for t in found.targets}, dict(found.unavailable)))

    def on_new(rec: Recorded) -> None:
        record = FindingRecord.found(
            rec.finding,
            status=rec.status,
            baseline=rec.baseline,
            baseline_case=baseline_cases.get(rec.baseline),
            ops_before=len(rec.original.ops),
            ops_after=len(rec.minimized.ops),
            seconds_to_find=rec.seconds_to_find,
            shrink=rec.shrink,
            versions=versions,
            confirmed=rec.confirmed,
            outside_baseline=None if rec.baseline else baseline.outside(rec.finding),
        )
        meta = {"signature": rec.signature, "kind": record.kind, "status": rec.status, "seed": config.seed}
        minimized = _titled(rec.minimized, record.sentence, meta)
        result = run_case(minimized, runner, infos, baseline)
        repro = None if cancelled(result.traces) else result.to_json()  # past the deadline: none
        emit(
            FindingFound(
                record, dump_case(minimized), dump_case(_titled(rec.original, "original program", meta)), repro
            )
        )

    try:
        if replay_programs:
            engine.process(replay_programs, on_new, known)
            emit(Progress(len(replay_programs), None, 0))
        _process_chunks(config, engine, claim, on_new, known, emit)
        while again():  # a claim paused behind this worker's own chunks: they are done now
            _process_chunks(config, engine, claim, on_new, known, emit)
    finally:
        runner.close()


def _process_chunks(
    config: CampaignConfig,
    engine: Engine,
    claim: Callable[[], int | None],
    on_new: Callable[[Recorded], None],
    known: Callable[[str], bool],
    emit: Callable[[Message], None],
) -> None:
    claimed: list[tuple[int, int]] = []  # (chunk, programs drawn), in the pipeline's order

    def chunks():
        while (chunk := claim()) is not None:
            drawn = engine.generate(config.chunk_size, chunk_seed(config.seed, chunk))
            claimed.append((chunk, len(drawn)))
            yield drawn

    # The next chunks are drawn while the targets run chunk k, and run while chunk k is compared;
    # shrinking a finding of chunk k first lets them finish (see engine.pipeline).
    for programs, results in pipeline(engine, chunks()):
        chunk, drawn = claimed.pop(0)
        engine.record(results, on_new, known)
        engine.forget(programs)
        # Drawn programs count as programs; those the engine had run already are not run again.
        # A chunk cut off by the deadline is not complete: a resume runs it again.
        cut = len(programs) - drawn_results(results)
        if engine.target_costs:  # before Progress, which saves the state
            emit(TargetCosts({tid: (n, us) for tid, (n, us) in engine.target_costs.items()}))
            engine.target_costs = {}
        emit(Progress(drawn - cut, None if cut else chunk, drawn - len(programs)))
        if engine.ran_nowhere:
            emit(RanNowhere(engine.ran_nowhere))
            engine.ran_nowhere = 0
        for tgt in engine.runner.targets:
            for line in tgt.process.stats.log:
                emit(LogLine(line))
            tgt.process.stats.log.clear()


def _worker_process(
    config_json: dict, worker: int, counter, limit, deadline, outq, seen, elapsed_before, replay_raw: list[bytes]
) -> None:
    config = CampaignConfig(**config_json)

    def claim() -> int | None:
        if time.time() >= deadline.value:
            return None
        with counter.get_lock():
            if limit.value >= 0 and counter.value >= limit.value:
                return None
            n = counter.value
            counter.value += 1
        return n

    unreachable = []  # the first error reaching the shared signature set, once logged

    def known(sig: str) -> bool:
        try:
            if sig in seen:
                return True
            seen[sig] = worker
            return False
        except Exception as e:  # noqa: BLE001 - the manager gone: the driver still drops repeats
            if not unreachable:
                unreachable.append(e)
                outq.put(
                    LogLine(
                        f"warning: worker {worker}: cannot reach the shared signature set "
                        f"({type(e).__name__}: {e}); repeated findings may be shrunk twice, and "
                        f"are recorded once"
                    )
                )
            return False

    _ignore_sigint()
    try:
        worker_loop(
            config,
            worker,
            claim,
            outq.put,
            known,
            elapsed_before,
            [program_from_bytes(r) for r in replay_raw],
            deadline.value + config.shrink_grace_s,
        )
    except InputError as e:  # reported by the parent; the other workers go on
        outq.put(WorkerError(f"worker {worker}: {e}", harness=False))
    except Exception as e:  # noqa: BLE001 - a harness bug outside any one program
        outq.put(WorkerError(f"worker {worker}: {type(e).__name__}: {e} at {line_of(e)}", harness=True))
    outq.put(WorkerDone(worker))


def _ignore_sigint() -> None:
    """Ctrl-C reaches the whole process group; the parent alone decides how workers stop (it
    terminates them), so a worker neither prints a traceback nor stops half-way on its own."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


# ------------------------------------------------------------------------------------------------
# The campaign driver (parent process): owns the run folder, the progress display, the exit code.


@dataclass
class CampaignResult:
    folder: RunFolder
    findings: list[dict[str, Any]]  # the records' JSON forms, in the order found
    programs: int
    seconds: float
    errors: list[str] = field(default_factory=list)
    #: Whether the harness itself failed outside any program (a worker's loop raised).
    harness_failed: bool = False
    #: Whether Ctrl-C or SIGTERM ended the campaign (its state is saved: ``--resume`` goes on).
    interrupted: bool = False
    #: Programs this run ran (``programs`` counts those of earlier runs of a resumed campaign too).
    programs_this_run: int = 0

    @property
    def new(self) -> list[dict[str, Any]]:
        return [f for f in self.findings if f["status"] == "new" and f["kind"] != HARNESS_ERROR]

    @property
    def harness_errors(self) -> list[dict[str, Any]]:
        return [f for f in self.findings if f["kind"] == HARNESS_ERROR]


def run_campaign(
    config: CampaignConfig, *, resume: bool = False, log: Callable[[str], None] = print, progress=None
) -> CampaignResult:
    # The folder is locked for the whole campaign (a second campaign on it is refused); a new
    # campaign never takes a folder holding a run, or a user's folder; a set-up that fails
    # removes the folder it created again.
    folder = RunFolder.open_existing(config.out) if resume else RunFolder.create_new(config.out)
    with folder:
        return _run_campaign(folder, config, resume, log, progress)


def _starting_state(
    folder: RunFolder, config: CampaignConfig, resume: bool, log: Callable[[str], None]
) -> tuple[CampaignConfig, dict[str, Any], list[dict[str, Any]]]:
    """(the configuration the campaign runs with, its state, the findings so far)."""
    if not resume:
        state = {
            "config": config.to_json(),
            "started": time.time(),
            "next_chunk": 0,
            "programs": 0,
            "elapsed_s": 0.0,
            "replayed": 0,
            "machine": machine_info(),
            "targets": {},
            "unavailable": {},
            "runs": [],
        }
        return config, state, []
    state = folder.load_state(config_fields=typing.get_type_hints(CampaignConfig), config_required=("out", "seed"))
    saved = CampaignConfig(**state["config"])
    # Checked as the command line's --chunk-size and a shared campaign's stored one are.
    if problem := option_problem("chunk_size", saved.chunk_size):
        raise CampaignError(f"{folder.state_json}: config.chunk_size {saved.chunk_size!r}: {problem}")
    # A resume continues the same campaign: same seed, targets and profile; the budget,
    # worker count, shrink grace, whether known findings are shrunk and the confirmation runs
    # may change.
    saved.budget_s, saved.max_programs, saved.workers = config.budget_s, config.max_programs, config.workers
    saved.shrink_grace_s, saved.shrink_known = config.shrink_grace_s, config.shrink_known
    saved.shrink_time_s, saved.confirm_runs = config.shrink_time_s, config.confirm_runs
    saved.out = config.out  # the folder may have been moved since
    if config.db is not None:  # the corpus URL as given: campaign.json holds it with its password hidden
        saved.db = config.db
    records, messages = folder.reconcile()  # the journal is the truth; nothing is lost
    for m in messages:
        log(m)
    return saved, state, records


def _run_campaign(
    folder: RunFolder, config: CampaignConfig, resume: bool, log: Callable[[str], None], progress
) -> CampaignResult:
    config, state, records = _starting_state(folder, config, resume, log)
    corpus = open_database(config.db, folder)  # checked writable now, before the first save
    folder.save_state(state)  # before any finding: a kill at any moment leaves a resumable folder
    replay = [] if resume else corpus.load()
    if corpus.skipped:
        log(
            f"warning: {corpus.name}: {corpus.skipped} corpus entr{'y' if corpus.skipped == 1 else 'ies'} "
            f"skipped: not a program this version can read"
        )
    state["replayed"] = state.get("replayed", 0) + len(replay)
    if replay:
        log(f"replaying {len(replay)} program(s) from the corpus")
    driver = _Driver(folder, config, state, records, corpus, log, progress)
    state["runs"].append(
        {
            "started": time.time(),
            "budget_s": config.budget_s,
            "max_programs": config.max_programs,
            "workers": config.workers,
            "resumed": resume,
        }
    )
    try:
        driver.run(replay)
    except KeyboardInterrupt:
        driver.interrupted = True
        log("interrupted: the campaign's state is saved; `--resume` goes on from here")
    return driver.finish()


class _Driver:
    """One campaign run in the parent process: hands out chunks (one worker) or starts the
    worker processes, and turns every worker message into the run folder's state."""

    def __init__(
        self,
        folder: RunFolder,
        config: CampaignConfig,
        state: dict[str, Any],
        records: list[dict[str, Any]],
        corpus: Corpus,
        log: Callable[[str], None],
        progress,
    ):
        self.folder, self.config, self.state, self.records = folder, config, state, records
        self.corpus, self.log, self.progress = corpus, log, progress
        self.elapsed_before = float(state.get("elapsed_s", 0.0))
        self.seen_sigs = {r["signature"] for r in records}
        self.start = time.monotonic()
        self.budget = config.budget_s if config.budget_s is not None else float("inf")
        self.chunk_limit = -1  # the chunk at which --max-programs ends the campaign (-1: none)
        self.errors: list[str] = []
        self.harness_failed = False
        self.interrupted = False
        self.programs_this_run = 0
        self.budget_announced = False
        self.handlers: dict[type, Callable[[Any], None]] = {
            TargetsOpened: self._targets,
            FindingFound: self._finding,
            Progress: self._progress,
            RanNowhere: self._ran_nowhere,
            TargetCosts: self._target_costs,
            LogLine: lambda m: self.log(m.line),
            WorkerError: self._error,
        }

    def run(self, replay: list[Program]) -> None:
        config, state = self.config, self.state
        if config.max_programs is not None and not config.campaign:  # a shared campaign's limit is in Redis
            self.chunk_limit = state["next_chunk"] + -(-max(0, config.max_programs - len(replay)) // config.chunk_size)
        if config.workers > 1:
            _run_workers(
                config,
                state["next_chunk"],
                self.chunk_limit,
                self.budget,
                self.seen_sigs,
                replay,
                self.elapsed_before,
                self.handle,
                self.budget_ended,
            )
            return
        counter = [state["next_chunk"]]

        def claim() -> int | None:
            if self.budget_ended():
                return None
            if self.chunk_limit >= 0 and counter[0] >= self.chunk_limit:
                return None
            counter[0] += 1
            return counter[0] - 1

        deadline = time.time() + self.budget + config.shrink_grace_s if self.budget != float("inf") else None
        worker_loop(config, 0, claim, self.handle, lambda s: s in self.seen_sigs, self.elapsed_before, replay, deadline)

    def budget_ended(self) -> bool:
        if time.monotonic() - self.start < self.budget:
            return False
        if not self.budget_announced:
            self.budget_announced = True
            grace = self.config.shrink_grace_s
            self.log(
                "budget reached: no new programs; finishing the chunks under way"
                + (f" (shrinking may take up to {grace:g} s more)" if grace else "")
            )
        return True

    def handle(self, msg: Message) -> None:
        self.handlers[type(msg)](msg)

    def _targets(self, msg: TargetsOpened) -> None:
        self.state["targets"].update(msg.targets)
        self.state["unavailable"].update(msg.unavailable)

    def _finding(self, msg: FindingFound) -> None:
        record = msg.record
        if record.signature in self.seen_sigs:
            return
        self.seen_sigs.add(record.signature)
        self.folder.add_finding(record.to_json(), msg.minimized, msg.original, msg.repro, self.records)
        if record.status == "new":
            first = not self.corpus.failures
            if not self.corpus.store(msg.minimized, msg.original) and first:  # the first failure; the count at the end
                self.log(f"warning: {self.corpus.last_error}")
        self.log(f"[{record.status}] {record.kind}: {record.sentence} -> {self.records[-1]['case']}")

    def _progress(self, msg: Progress) -> None:
        state = self.state
        self.programs_this_run += msg.programs
        state["programs"] = state.get("programs", 0) + msg.programs
        state["repeats_skipped"] = state.get("repeats_skipped", 0) + msg.repeats
        if msg.chunk is not None:
            state["next_chunk"] = max(state.get("next_chunk", 0), msg.chunk + 1)
        state["elapsed_s"] = self.elapsed_before + time.monotonic() - self.start
        self.folder.save_state(state)
        if self.progress:
            self.progress(state, self.records)

    def _ran_nowhere(self, msg: RanNowhere) -> None:
        first = not self.state.get("ran_nowhere")
        self.state["ran_nowhere"] = self.state.get("ran_nowhere", 0) + msg.programs
        if first:
            self.log(
                f"warning: {msg.programs} program(s) ran on no target (every target failed them): they are "
                f"not compared, so they count as no agreement; see the report"
            )

    def _target_costs(self, msg: TargetCosts) -> None:
        costs = self.state.setdefault("target_costs", {})
        for tid, (programs, us) in msg.costs.items():
            cost = costs.setdefault(tid, {"programs": 0, "probe_s": 0.0})
            cost["programs"] += programs
            cost["probe_s"] = round(cost["probe_s"] + us / 1e6, 6)

    def _error(self, msg: WorkerError) -> None:
        self.errors.append(msg.message)
        self.harness_failed |= msg.harness
        self.log(f"error: {msg.message}")

    def finish(self) -> CampaignResult:
        """Saves the state as this run leaves it and makes sure the folder has its list of
        findings; the campaign's result."""
        state, last = self.state, self.state["runs"][-1]
        if self.corpus.failures:
            self.log(f"warning: {self.corpus.summary()}")
        state["elapsed_s"] = self.elapsed_before + time.monotonic() - self.start
        last["ended"], last["programs"], last["interrupted"] = time.time(), self.programs_this_run, self.interrupted
        self.folder.save_state(state)
        self.folder.ensure_findings_list()
        return CampaignResult(
            self.folder,
            self.records,
            state["programs"],
            state["elapsed_s"],
            self.errors,
            harness_failed=self.harness_failed,
            interrupted=self.interrupted,
            programs_this_run=self.programs_this_run,
        )


def _run_workers(
    config: CampaignConfig,
    next_chunk: int,
    chunk_limit: int,
    budget: float,
    seen_sigs: set[str],
    replay: list[Program],
    elapsed_before: float,
    handle: Callable[[Message], None],
    budget_ended: Callable[[], bool],
) -> None:
    """``config.workers`` worker processes, each with its own targets, claiming chunks from one
    shared counter; their messages go to ``handle`` in this process. On Ctrl-C the workers are
    stopped (they ignore SIGINT themselves) and ``KeyboardInterrupt`` goes on up."""
    from multiprocessing.managers import SyncManager

    ctx = mp.get_context("spawn")
    manager = SyncManager(ctx=ctx)
    manager.start(_ignore_sigint)
    procs = []
    try:
        seen = manager.dict({s: -1 for s in seen_sigs})
        counter = ctx.Value("q", next_chunk)
        limit = ctx.Value("q", chunk_limit)
        deadline = ctx.Value("d", time.time() + min(budget, 10**9))
        outq = ctx.Queue()
        shares = [replay[i :: config.workers] for i in range(config.workers)]
        procs = [
            ctx.Process(
                target=_worker_process,
                daemon=True,
                args=(
                    config.to_json(),
                    w,
                    counter,
                    limit,
                    deadline,
                    outq,
                    seen,
                    elapsed_before,
                    [program_to_bytes(p) for p in shares[w]],
                ),
            )
            for w in range(config.workers)
        ]
        for p in procs:
            p.start()
        alive = config.workers
        while alive:
            budget_ended()
            try:
                msg = outq.get(timeout=1.0)
            except queue_mod.Empty:
                if not any(p.is_alive() for p in procs):
                    break
                continue
            if isinstance(msg, WorkerDone):
                alive -= 1
            else:
                handle(msg)
        for p in procs:
            p.join(timeout=10)
    except KeyboardInterrupt:
        for p in procs:
            p.terminate()
        for p in procs:
            p.join(timeout=10)
        raise
    finally:
        manager.shutdown()


def machine_info() -> dict[str, Any]:
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "hostname": platform.node(),
    }
