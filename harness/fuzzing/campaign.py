"""Campaigns: a budgeted fuzzing run that streams findings to a run folder and can be resumed.

Run folder layout (all writes are atomic or append-only, so a campaign killed at any moment loses
nothing it already reported):

- ``campaign.json``: configuration, versions, machine, progress (rewritten atomically);
- ``findings.jsonl``: one line per finding, appended and fsync'ed as it is found (the journal);
- ``findings.json``: the same findings as one JSON list (rewritten atomically after each one);
- ``cases/NNN-<hash>.toml``: the minimized case of each finding (``aliasfuzz repro`` replays it),
  ``.original.toml`` the program it was found in, ``.json`` the repro result on every target;
- ``corpus/``: the Hypothesis example database, unless ``--db`` points elsewhere.

Workers: ``--workers N`` starts N processes, each with its own targets; they claim chunks from a
shared counter, so the chunk -> programs mapping stays fixed by the seed whatever N is.
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
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from harness.fuzzing.baseline import load_baseline
from harness.fuzzing.corpus import open_database
from harness.fuzzing.engine import Engine, Recorded, cancelled, chunk_seed, pipeline
from harness.errors import CampaignError, InputError
from harness.judging.harness_errors import HARNESS_ERROR, line_of
from harness.files import atomic_write
from harness.case.ir import Program, dump_case
from harness.fuzzing.run_folder import RunFolder, program_from_bytes, program_to_bytes


def parse_duration(text: str | None) -> float | None:
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", str(text))
    if not m:
        raise CampaignError(f"--budget: {text!r} is not a duration like 90s, 10m, 2h")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


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

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# ------------------------------------------------------------------------------------------------
# The worker loop (in-process for one worker, one process each for several).


def _record_json(rec: Recorded, versions: dict[str, dict[str, str]]) -> dict[str, Any]:
    f = rec.finding
    return {
        "signature": rec.signature, "kind": f.kind, "aspect": f.aspect, "status": rec.status,
        "baseline": rec.baseline, "targets": [t for t in f.targets if t != "-"], "op": f.op_label,
        "method": f.method, "sides": list(f.sides), "values": None if f.values is None else list(f.values),
        "at": f.at, "sentence": f.sentence(), "detail": f.detail,
        "ops_before": len(rec.original.ops), "ops_after": len(rec.minimized.ops),
        "seconds_to_find": round(rec.seconds_to_find, 3),
        "shrink_seconds": round(rec.shrink.seconds, 3) if rec.shrink else None,
        "shrink_complete": rec.shrink.complete if rec.shrink else None,
        "shrink_runs": rec.shrink.runs if rec.shrink else None,
        "shrink_hypothesis_runs": rec.shrink.hypothesis_runs if rec.shrink else None,
        "versions": {t: versions.get(t, {}) for t in f.targets if t != "-"},
    }


def _titled(program: Program, title: str, meta: dict[str, Any]) -> Program:
    from dataclasses import replace

    return replace(program, title=title, meta=meta)


#: How long the chunks under way when the budget and the shrink grace end may still take before
#: the runner cuts its waits: long enough for responsive targets to finish a chunk, short enough
#: that a hung probe cannot hold a campaign past its budget for long.
DRAIN_S = 10.0


def worker_loop(config: CampaignConfig, worker: int, claim: Callable[[], int | None],
                emit: Callable[[tuple], None], known: Callable[[str], bool], elapsed_before: float,
                replay_programs: list[Program], deadline: float | None = None) -> None:
    """Opens targets, replays the corpus share, then processes claimed chunks until ``claim``
    returns None. Everything it learns goes out through ``emit``. ``deadline`` (``time.time()``)
    bounds shrinking: the budget's end plus the shrink grace."""
    from harness.reporting.repro import run_case
    from harness.targets.registry import open_runner

    baseline = load_baseline(config.baseline)
    runner, found = open_runner(config.targets)
    if deadline is not None:  # past it (and a drain), whatever a target is doing (a hung probe) is cut off
        runner.set_deadline(time.monotonic() + max(0.0, deadline - time.time()) + DRAIN_S)
    infos = runner.infos
    versions = {tid: dict(info.versions) for tid, info in infos.items()}
    engine = Engine(runner, baseline, shrink_time_s=config.shrink_time_s, profile=config.profile,
                    deadline=deadline, shrink_known=config.shrink_known)
    baseline_cases = {e.id: e.case for e in baseline.entries}
    engine.started -= elapsed_before
    emit(("targets", {t.id: t.info.to_json() for t in found.targets}, found.unavailable))

    def on_new(rec: Recorded) -> None:
        record = _record_json(rec, versions)
        if rec.baseline is not None:
            record["baseline_case"] = baseline_cases.get(rec.baseline)
        meta = {"signature": rec.signature, "kind": record["kind"], "status": rec.status,
                "seed": config.seed}
        minimized = _titled(rec.minimized, record["sentence"], meta)
        result = run_case(minimized, runner, infos, baseline)
        repro = None if cancelled(result.traces) else result.to_json()  # past the deadline: none
        emit(("finding", record, dump_case(minimized), dump_case(_titled(rec.original, "original program", meta)),
              repro))

    try:
        if replay_programs:
            engine.process(replay_programs, on_new, known)
            emit(("progress", len(replay_programs), None, 0))
        claimed: list[int] = []

        def chunks():
            while (chunk := claim()) is not None:
                drawn = engine.generate(config.chunk_size, chunk_seed(config.seed, chunk))
                claimed.append((chunk, len(drawn)))
                yield drawn

        # Chunk k+1 is drawn while the targets run chunk k, and runs while chunk k is compared;
        # shrinking a finding of chunk k first lets it finish (see engine.pipeline).
        for programs, results in pipeline(engine, chunks()):
            chunk, drawn = claimed.pop(0)
            engine.record(results, on_new, known)
            engine.forget(programs)
            # Drawn programs count as programs; those the engine had run already are not run again.
            # A chunk cut off by the deadline is not complete: a resume runs it again.
            cut = len(programs) - len(results)
            emit(("progress", drawn - cut, None if cut else chunk, drawn - len(programs)))
            if engine.ran_nowhere:
                emit(("ran_nowhere", engine.ran_nowhere))
                engine.ran_nowhere = 0
            for tgt in runner.targets:
                for line in tgt.process.stats.log:
                    emit(("log", line))
                tgt.process.stats.log.clear()
    finally:
        runner.close()


def _worker_process(config_json: dict, worker: int, counter, limit, deadline, outq, seen, elapsed_before,
                    replay_raw: list[bytes]) -> None:
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

    def known(sig: str) -> bool:
        try:
            if sig in seen:
                return True
            seen[sig] = worker
            return False
        except Exception:
            return False

    _ignore_sigint()
    try:
        worker_loop(config, worker, claim, outq.put, known, elapsed_before,
                    [program_from_bytes(r) for r in replay_raw],
                    deadline.value + config.shrink_grace_s)
    except InputError as e:  # reported by the parent; the other workers go on
        outq.put(("error", f"worker {worker}: {e}", "setup"))
    except Exception as e:  # noqa: BLE001 - a harness bug outside any one program
        outq.put(("error", f"worker {worker}: {type(e).__name__}: {e} at {line_of(e)}", "harness"))
    outq.put(("done", worker))


def _ignore_sigint() -> None:
    """Ctrl-C reaches the whole process group; the parent alone decides how workers stop (it
    terminates them), so a worker neither prints a traceback nor stops half-way on its own."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


# ------------------------------------------------------------------------------------------------
# The campaign driver (parent process): owns the run folder, the progress display, the exit code.


@dataclass
class CampaignResult:
    folder: RunFolder
    findings: list[dict[str, Any]]
    programs: int
    seconds: float
    errors: list[str] = field(default_factory=list)
    #: Whether the harness itself failed outside any program (a worker's loop raised).
    harness_failed: bool = False
    #: Whether Ctrl-C or SIGTERM ended the campaign (its state is saved: ``--resume`` goes on).
    interrupted: bool = False

    @property
    def new(self) -> list[dict[str, Any]]:
        return [f for f in self.findings if f["status"] == "new" and f["kind"] != HARNESS_ERROR]

    @property
    def harness_errors(self) -> list[dict[str, Any]]:
        return [f for f in self.findings if f["kind"] == HARNESS_ERROR]


def run_campaign(config: CampaignConfig, *, resume: bool = False, log: Callable[[str], None] = print,
                 progress=None) -> CampaignResult:
    # The folder is locked for the whole campaign (a second campaign on it is refused); a new
    # campaign never takes a folder holding a run, or a user's folder; a set-up that fails
    # removes the folder it created again.
    folder = RunFolder.open_existing(config.out) if resume else RunFolder.create_new(config.out)
    with folder:
        return _run_campaign(folder, config, resume, log, progress)


def _run_campaign(folder: RunFolder, config: CampaignConfig, resume: bool, log: Callable[[str], None],
                  progress) -> CampaignResult:
    state: dict[str, Any]
    if resume:
        state = folder.load_state(config_fields=typing.get_type_hints(CampaignConfig),
                                  config_required=("out", "seed"))
        saved = CampaignConfig(**state["config"])
        # A resume continues the same campaign: same seed, targets and profile; the budget,
        # worker count, shrink grace and whether known findings are shrunk may change.
        saved.budget_s, saved.max_programs, saved.workers = config.budget_s, config.max_programs, config.workers
        saved.shrink_grace_s, saved.shrink_known = config.shrink_grace_s, config.shrink_known
        saved.shrink_time_s = config.shrink_time_s
        saved.out = config.out  # the folder may have been moved since
        config = saved
        records, messages = folder.reconcile()  # the journal is the truth; nothing is lost
        for m in messages:
            log(m)
    else:
        records = []
        state = {"config": config.to_json(), "started": time.time(), "next_chunk": 0, "programs": 0,
                 "elapsed_s": 0.0, "replayed": 0, "machine": machine_info(), "targets": {},
                 "unavailable": {}, "runs": []}
    corpus = open_database(config.db, folder)  # checked writable now, before the first save
    folder.save_state(state)  # before any finding: a kill at any moment leaves a resumable folder
    elapsed_before = float(state.get("elapsed_s", 0.0))
    seen_sigs = {r["signature"] for r in records}
    replay = [] if resume else corpus.load()
    state["replayed"] = state.get("replayed", 0) + len(replay)
    if replay:
        log(f"replaying {len(replay)} program(s) from the corpus")
    start = time.monotonic()
    budget = config.budget_s if config.budget_s is not None else float("inf")
    chunk_limit = -1
    if config.max_programs is not None:
        chunk_limit = state["next_chunk"] + -(-max(0, config.max_programs - len(replay)) // config.chunk_size)
    state["runs"].append({"started": time.time(), "budget_s": config.budget_s, "max_programs": config.max_programs,
                          "workers": config.workers, "resumed": resume})
    errors: list[str] = []
    harness_failed = False
    programs_this_run = 0
    completed_chunks: set[int] = set()

    def handle(msg: tuple) -> None:
        nonlocal programs_this_run, harness_failed
        kind = msg[0]
        if kind == "targets":
            state["targets"].update(msg[1])
            state["unavailable"].update(msg[2])
        elif kind == "finding":
            _, record, minimized, original, repro = msg
            if record["signature"] in seen_sigs:
                return
            seen_sigs.add(record["signature"])
            folder.add_finding(record, minimized, original, repro, records)
            if record["status"] == "new":
                first = not corpus.failures
                if not corpus.store(minimized, original) and first:  # the first failure; the count at the end
                    log(f"warning: {corpus.last_error}")
            log(f"[{record['status']}] {record['kind']}: {record['sentence']} -> {records[-1]['case']}")
        elif kind == "progress":
            _, n, chunk, repeats = msg
            programs_this_run += n
            state["programs"] = state.get("programs", 0) + n
            state["repeats_skipped"] = state.get("repeats_skipped", 0) + repeats
            if chunk is not None:
                completed_chunks.add(chunk)
                state["next_chunk"] = max(state.get("next_chunk", 0), chunk + 1)
            state["elapsed_s"] = elapsed_before + time.monotonic() - start
            folder.save_state(state)
            if progress:
                progress(state, records)
        elif kind == "ran_nowhere":
            first = not state.get("ran_nowhere")
            state["ran_nowhere"] = state.get("ran_nowhere", 0) + msg[1]
            if first:
                log(f"warning: {msg[1]} program(s) ran on no target (every target failed them): they are "
                    f"not compared, so they count as no agreement; see the report")
        elif kind == "log":
            log(msg[1])
        elif kind == "error":
            errors.append(msg[1])
            harness_failed |= msg[2] == "harness"
            log(f"error: {msg[1]}")

    announced = False

    def budget_ended() -> bool:
        nonlocal announced
        if time.monotonic() - start < budget:
            return False
        if not announced:
            announced = True
            log("budget reached: no new programs; finishing the chunks under way"
                + (f" (shrinking may take up to {config.shrink_grace_s:g} s more)" if config.shrink_grace_s else ""))
        return True

    interrupted = False
    try:
        if config.workers <= 1:
            counter = [state["next_chunk"]]

            def claim() -> int | None:
                if budget_ended():
                    return None
                if chunk_limit >= 0 and counter[0] >= chunk_limit:
                    return None
                counter[0] += 1
                return counter[0] - 1

            worker_loop(config, 0, claim, handle, lambda s: s in seen_sigs, elapsed_before, replay,
                        time.time() + budget + config.shrink_grace_s if budget != float("inf") else None)
        else:
            _run_workers(config, state["next_chunk"], chunk_limit, budget, seen_sigs, replay, elapsed_before,
                         handle, budget_ended)
    except KeyboardInterrupt:
        interrupted = True
        log("interrupted: the campaign's state is saved; `--resume` goes on from here")

    if corpus.failures:
        log(f"warning: {corpus.summary()}")
    state["elapsed_s"] = elapsed_before + time.monotonic() - start
    state["runs"][-1]["ended"] = time.time()
    state["runs"][-1]["programs"] = programs_this_run
    state["runs"][-1]["interrupted"] = interrupted
    folder.save_state(state)
    if not folder.findings_json.exists():
        atomic_write(folder.findings_json, "[]")
    return CampaignResult(folder, records, state["programs"], state["elapsed_s"], errors,
                          harness_failed=harness_failed, interrupted=interrupted)


def _run_workers(config: CampaignConfig, next_chunk: int, chunk_limit: int, budget: float,
                 seen_sigs: set[str], replay: list[Program], elapsed_before: float,
                 handle: Callable[[tuple], None], budget_ended: Callable[[], bool]) -> None:
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
        deadline = ctx.Value("d", time.time() + min(budget, 10 ** 9))
        outq = ctx.Queue()
        shares = [replay[i::config.workers] for i in range(config.workers)]
        procs = [ctx.Process(target=_worker_process, daemon=True,
                             args=(config.to_json(), w, counter, limit, deadline, outq, seen, elapsed_before,
                                   [program_to_bytes(p) for p in shares[w]]))
                 for w in range(config.workers)]
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
            if msg[0] == "done":
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
    return {"platform": platform.platform(), "machine": platform.machine(), "python": platform.python_version(),
            "cpus": os.cpu_count(), "hostname": platform.node()}
