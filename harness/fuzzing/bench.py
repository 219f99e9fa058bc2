"""``aliasfuzz bench``: how fast the engine is against what bounds it, on this machine, one seed.

Measured in one run, on the same chunks of programs (``chunk_seed(seed, k)``):

- ``ceiling``: Hypothesis's ``@given`` loop drawing the programs, nothing executed
  (``generation.generate_given``); every throughput figure counts distinct programs (the engine
  runs a program once, ``Engine.unseen``; every ``@given`` run opens with the same examples);
- ``draw``: the strategy drawn as the engine draws it (``generation.generate``, a
  ``ConjectureData`` per program), nothing executed: the generation ceiling of the engine;
- ``target_bound``: the most the targets could run on this machine's cores (``bench_limits``);
  the engine is given as a fraction of each;
- ``engine``: the full engine, generate + run on every CPU target + oracle, its metamorphic
  variants included (``engine_no_variants``: without them; ``bench_limits.VariantCost``), as a
  campaign worker does it (``engine.pipeline``: the next chunks are drawn while the targets run
  chunk k); ``engine_serial`` is the same without the overlap (generate, then ``Engine.check``);
- ``spawn``: the naive baseline, a fresh probe process per program and target (start, handshake,
  one program, exit), the targets run concurrently, then the oracle;
- ``engine_2workers``: two worker processes, each with its own probes, claiming the chunks from
  a shared counter as campaign workers do;
- ``cpu_ms_per_program``, ``cores_used_1worker``: CPU seconds of the worker and of each target
  over the engine run, and how many cores one worker keeps busy; ``worker_stages_ms``,
  ``worker_profile``: the worker's by stage and its top functions (``bench_stages``);
- ``per_target``: each target alone, wall seconds per program (pipe, decoding) and its ``elapsed_us``;
  ``per_length``: engine seconds per program (run + oracle) for programs of exactly 8/16/32/64 ops;
- ``rss``: resident memory of the worker (this process) and of every probe, sampled along a
  long run (``--rss-programs``).

Figures are wall-clock on a shared machine (the load average is printed with them). The ceiling,
the engine and the two workers are timed back to back in each of ``repeat`` rounds; a figure is
the middle round's (all under ``<name>_runs``), a ratio the middle per-round ratio: drift cancels.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.case.ir import Program
from harness.fuzzing.baseline import Baseline
from harness.fuzzing.bench_limits import CEILING_TARGET, VariantCost, limit_figures
from harness.fuzzing.bench_stages import stage_figures
from harness.fuzzing.engine import Engine, chunk_seed, pipeline
from harness.fuzzing.generation import Drawer, generate, generate_given
from harness.judging.oracle import compare
from harness.targets.base import ProbeProcess, SetupError, Target
from harness.targets.registry import discover
from harness.targets.runner import Runner
from harness.targets.trace import Trace

LENGTHS = (8, 16, 32, 64)


@dataclass
class BenchConfig:
    seed: int = 1
    programs: int = 512
    chunk_size: int = 64
    profile: str = "default"
    targets: list[str] | None = None
    spawn_programs: int = 4
    length_programs: int = 64
    rss_programs: int = 5000
    rss_points: int = 10
    workers: bool = True
    repeat: int = 5
    profile_top: int = 12  # functions in the worker's profile (0 skips it)


@dataclass
class BenchResult:
    figures: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return self.figures


def rss_kib(pid: int | None) -> int | None:
    """Resident set size of a process in KiB (Linux ``/proc``), None when it is gone."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def open_bench_targets(wanted: list[str] | None):
    """The targets wanted, whatever their device (``burn:wgpu`` is measured by naming it), or
    by default every CPU target, the other devices closed again."""

    found = discover(wanted)
    if wanted is None:  # as every command: only an explicit list may leave a framework out
        found.require_all()
    keep = [t for t in found.targets if wanted is not None or t.info.kind == "cpu"]
    for t in found.targets:
        if t not in keep:
            t.close()
    found.targets = keep
    return found


def cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU seconds a process has used (Linux ``/proc``), None when it is gone."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # the command name may hold spaces
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu_snapshot(engine: Engine) -> dict[str, float | None]:
    out: dict[str, float | None] = {"worker": time.process_time()}  # every thread of this process
    for t in engine.runner.targets:
        out[t.id] = cpu_seconds(t.process.pid)
    return out


def _chunks(config: BenchConfig, counter=None, drawer: Drawer = generate):
    """The benchmark's chunks, in order, drawn as campaigns draw them (or by ``drawer``); with
    a shared ``counter`` (a ``multiprocessing.Value``), only those this process claims first, as
    campaign workers claim chunks, so one slow chunk does not leave another worker idle."""
    n_chunks = -(-config.programs // config.chunk_size)
    k = -1
    while True:
        if counter is None:
            k += 1
        else:
            with counter.get_lock():
                k = counter.value
                counter.value += 1
        if k >= n_chunks:
            return
        yield drawer(config.chunk_size, chunk_seed(config.seed, k), config.profile)


def _load() -> str:
    try:
        with open("/proc/loadavg", encoding="ascii") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def measure_drawing(config: BenchConfig, drawer: Drawer) -> tuple[float, int]:
    """Seconds to draw the programs with ``drawer``, and how many distinct ones were drawn (the
    engine runs each distinct program once: ``Engine.unseen``)."""
    start = time.perf_counter()
    chunks = list(_chunks(config, drawer=drawer))
    seconds = time.perf_counter() - start
    return seconds, len({p.key() for c in chunks for p in c})


def measure_engine(engine: Engine, config: BenchConfig) -> tuple[float, int, int, dict[str, float]]:
    """Wall seconds, programs, divergent programs, and CPU seconds per process (the worker and
    each target) over the run."""
    engine.ran.clear()  # every round runs the same programs: none counts as run before
    before = _cpu_snapshot(engine)
    start = time.perf_counter()
    n = divergent = 0
    for programs, results in pipeline(engine, _chunks(config)):
        n += len(programs)
        divergent += sum(1 for _, _, f in results if f)
    wall = time.perf_counter() - start
    after = _cpu_snapshot(engine)
    cpu = {
        k: after[k] - before[k] for k in before if before[k] is not None and after.get(k) is not None
    }  # a restarted probe is left out
    return wall, n, divergent, cpu


def measure_engine_serial(engine: Engine, config: BenchConfig) -> tuple[float, int]:
    engine.ran.clear()
    start = time.perf_counter()
    n = 0
    for programs in _chunks(config):
        programs = engine.unseen(programs)
        engine.check(programs)
        n += len(programs)
    return time.perf_counter() - start, n


def measure_spawn(targets: Sequence[Target], programs: Sequence[Program]) -> float:
    """A fresh process per program and target: start, handshake, one program, exit."""

    def one(t: Target, wire: dict, out: dict) -> None:
        proc = ProbeProcess(t.id, t.process.argv, cwd=t.process.cwd, env=t.process.env, timeout_s=t.process.timeout_s)
        proc.start()
        try:
            out[t.id] = proc.run_batch(t.info.device, [wire], t.id)[0]
        finally:
            proc.stop()

    start = time.perf_counter()
    for p in programs:
        wire = p.to_wire()
        traces: dict[str, Trace] = {}
        threads = [threading.Thread(target=one, args=(t, wire, traces)) for t in targets]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        compare(p, traces)
    return time.perf_counter() - start


def measure_per_target(targets: Sequence[Target], programs: Sequence[Program]) -> dict[str, dict[str, float]]:
    wires = [p.to_wire() for p in programs]
    out = {}
    for t in targets:
        start = time.perf_counter()
        traces = t.run_wire(wires)
        wall = time.perf_counter() - start
        probe = sum(tr.elapsed_us for tr in traces) / 1e6
        out[t.id] = {"wall_s_per_program": wall / len(wires), "probe_s_per_program": probe / len(wires)}
    return out


def measure_lengths(engine: Engine, config: BenchConfig) -> tuple[dict[int, float], dict[int, float]]:
    run_cost: dict[int, float] = {}
    gen_cost: dict[int, float] = {}
    for n_ops in LENGTHS:
        start = time.perf_counter()
        programs = generate(config.length_programs, chunk_seed(config.seed, 10_000 + n_ops), config.profile, n_ops)
        gen_cost[n_ops] = (time.perf_counter() - start) / len(programs)
        assert all(len(p.ops) == n_ops for p in programs), "generate(max_ops=N) must force N ops"
        start = time.perf_counter()
        engine.check(programs)
        run_cost[n_ops] = (time.perf_counter() - start) / len(programs)
    return run_cost, gen_cost


def measure_rss(engine: Engine, config: BenchConfig, log) -> list[dict[str, Any]]:
    """Runs ``rss_programs`` programs (fresh seeds) and samples RSS at ``rss_points`` points."""
    cfg = BenchConfig(**{**config.__dict__, "programs": config.rss_programs, "seed": config.seed + 1})
    n_chunks = -(-cfg.programs // cfg.chunk_size)
    every = max(1, n_chunks // max(1, cfg.rss_points))
    points = []

    def sample(n: int) -> None:
        point = {"programs": n, "worker_kib": rss_kib(os.getpid())}
        for t in engine.runner.targets:
            point[t.id] = rss_kib(t.process.pid)
        points.append(point)
        log(
            f"  rss after {n:>7} programs: "
            + ", ".join(
                f"{k.removesuffix('_kib')} {v / 1024:.0f} MiB"
                for k, v in point.items()
                if k != "programs" and v is not None
            )
        )

    sample(0)
    drawn = []  # programs drawn, as a campaign counts them (repeats are drawn but not run again)

    def chunks():
        for c in _chunks(cfg):
            drawn.append(len(c))
            yield c

    n = 0
    for k, _ in enumerate(pipeline(engine, chunks())):
        n += drawn[k]
        if (k + 1) % every == 0 or n >= cfg.programs:
            sample(n)
    return points


# -- two workers --------------------------------------------------------------------------------


@dataclass(frozen=True)
class RoundDone:
    """A bench worker's round: the programs it ran, or (``programs`` -1) why it failed."""

    worker: int
    programs: int
    error: str = ""


def _worker_main(config_json: dict, worker: int, rounds, counters, ready, outq) -> None:
    config = BenchConfig(**config_json)
    found = open_bench_targets(config.targets)
    runner = Runner(found.targets)
    try:
        engine = Engine(runner, Baseline([]))
        for _ in pipeline(engine, [generate(8, 99 + worker, config.profile)]):
            pass  # warm the probes and Hypothesis
        for go, counter in zip(rounds, counters):
            engine.ran.clear()  # every round runs the same programs
            ready.release()
            go.wait()
            n = 0
            for programs, _results in pipeline(engine, _chunks(config, counter)):
                n += len(programs)
            outq.put(RoundDone(worker, n))
    except BaseException as e:  # reported by the parent
        ready.release()
        outq.put(RoundDone(worker, -1, repr(e)))
    finally:
        runner.close()


class WorkerRounds:
    """Two (or more) warm worker processes, each with its own probes, that run the benchmark's
    chunks once per ``round()``, claiming chunks from a shared counter as campaign workers do.

    Starting them (importing torch, starting probes, warming Hypothesis) happens in
    ``__enter__``, before any round is timed; between rounds the workers wait on an event, so
    the parent can time other figures while they hold no CPU."""

    def __init__(self, config: BenchConfig, workers: int = 2, rounds: int = 1):
        ctx = mp.get_context("spawn")
        self._go = [ctx.Event() for _ in range(rounds)]
        self._counters = [ctx.Value("i", 0) for _ in range(rounds)]
        self._ready, self._outq = ctx.Semaphore(0), ctx.Queue()
        self._procs = [
            ctx.Process(
                target=_worker_main,
                daemon=True,
                args=(config.__dict__, w, self._go, self._counters, self._ready, self._outq),
            )
            for w in range(workers)
        ]
        self._next = 0

    def __enter__(self) -> WorkerRounds:
        for p in self._procs:
            p.start()
        try:
            self._wait_ready()  # their start-up must not overlap anything the parent times
        except BaseException:
            self.__exit__()
            raise
        return self

    def _wait_ready(self) -> None:
        for _ in self._procs:
            while not self._ready.acquire(timeout=1.0):
                dead = [p for p in self._procs if p.exitcode is not None]
                if dead:  # died before it could say so (an import or start-up failure)
                    raise RuntimeError(f"bench worker exited with code {dead[0].exitcode} before its round")

    def round(self) -> tuple[float, int]:
        """Wall seconds from the moment every worker is warm and waiting until the last one is
        done, and the programs run."""
        go = self._go[self._next]
        self._next += 1
        start = time.perf_counter()
        go.set()
        results = [self._outq.get() for _ in self._procs]
        end = time.perf_counter()
        bad = [r for r in results if r.programs < 0]
        if bad:
            raise RuntimeError(f"bench worker failed: {bad[0].error}")
        if self._next < len(self._go):
            self._wait_ready()  # idle again before the parent times its next figure
        return end - start, sum(r.programs for r in results)

    def __exit__(self, *exc) -> None:
        unfinished = self._next < len(self._go)  # an error in the parent: stop the workers now
        for p in self._procs:
            if unfinished:
                p.kill()  # its probes see their stdin close and exit
            p.join(timeout=30)
            if p.is_alive():
                p.kill()


def _median(xs: Sequence[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def _spread(xs: Sequence[float]) -> str:
    return f" (median of {len(xs)}: {min(xs):.1f}-{max(xs):.1f})" if len(xs) > 1 else ""


# -- the whole benchmark ------------------------------------------------------------------------


def run_bench(config: BenchConfig, log=print) -> BenchResult:
    fig: dict[str, Any] = {
        "seed": config.seed,
        "programs": config.programs,
        "chunk_size": config.chunk_size,
        "profile": config.profile,
        "cpus": os.cpu_count(),
        "load_before": _load(),
    }
    found = open_bench_targets(config.targets)
    if not found.targets:
        found.close()

        raise SetupError("no CPU target is available (run `aliasfuzz targets`)")
    fig["targets"] = [t.id for t in found.targets]
    fig["unavailable"] = dict(found.unavailable)
    runner = Runner(found.targets)
    engine = Engine(runner, Baseline([]))
    try:
        log(
            f"aliasfuzz bench: targets {', '.join(fig['targets'])}; {config.programs} programs, "
            f"seed {config.seed}, profile {config.profile}; load {fig['load_before']}"
        )
        warm = generate(16, 12345, config.profile)  # first-use costs (imports, caches) out of the timings
        engine.check(warm)
        variant_cost = VariantCost(engine)
        rounds, engine_runs = _throughput_rounds(engine, config, variant_cost, log)
        _throughput_figures(fig, rounds, engine_runs, log)
        stage_figures(fig, engine, lambda drawer: _chunks(config, drawer=drawer), log, config.profile_top)
        limit_figures(fig, log)
        variant_cost.figures(fig, log)
        _baseline_figures(fig, engine, config, log)
        _cost_figures(fig, engine, config, log)
        fig["restarts"] = {t.id: t.process.stats.starts - 1 for t in runner.targets}
        fig["load_after"] = _load()
        return BenchResult(fig)
    finally:
        runner.close()


def _throughput_rounds(engine: Engine, config: BenchConfig, variant_cost: VariantCost, log) -> tuple[dict, list]:
    """The throughput figures of every round (programs/s by name) and the engine runs
    (``measure_engine``'s results). Each round times the ceiling, the engine (with and without
    its metamorphic variants) and the two workers back to back on the same programs: this machine's speed drifts by up to 1.8x within a
    minute, so each ratio is taken within a round and the middle round's figure is reported
    (every round's is kept under ``<name>_runs``)."""
    rounds: dict[str, list[float]] = {
        k: [] for k in ("ceiling", "draw", "engine", "engine_no_variants", "engine_2workers")
    }
    engine_runs = []
    with WorkerRounds(config, 2, config.repeat) if config.workers else contextlib.nullcontext() as workers:
        for r in range(config.repeat):
            seconds, n = measure_drawing(config, generate_given)
            rounds["ceiling"].append(n / seconds)
            seconds, n = measure_drawing(config, generate)
            rounds["draw"].append(n / seconds)
            run, plain = variant_cost.measure(lambda e: measure_engine(e, config))
            engine_runs.append(run)
            rounds["engine"].append(run[1] / run[0])
            rounds["engine_no_variants"].append(plain[1] / plain[0])
            if workers is not None:
                seconds, n = workers.round()
                rounds["engine_2workers"].append(n / seconds)
            log(f"    round {r + 1}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in rounds.items() if v) + " programs/s")
    return rounds, engine_runs


def _throughput_figures(fig: dict[str, Any], rounds: dict[str, list[float]], engine_runs: list[tuple], log) -> None:
    for name, rates in rounds.items():
        if rates:
            fig[f"{name}_pps"], fig[f"{name}_pps_runs"] = _median(rates), rates
    fig["ratio_ceiling"] = _median([e / c for e, c in zip(rounds["engine"], rounds["ceiling"])])
    if rounds["engine_2workers"]:
        fig["ratio_2workers"] = _median([w / e for w, e in zip(rounds["engine_2workers"], rounds["engine"])])
    seconds, n, divergent, cpu = sorted(engine_runs, key=lambda r: r[1] / r[0])[len(engine_runs) // 2]
    fig["divergent_programs"] = divergent
    log(f"(a) ceiling (generation only):   {fig['ceiling_pps']:8.1f} programs/s{_spread(rounds['ceiling'])}")
    log(
        f"(b) engine (pipelined):          {fig['engine_pps']:8.1f} programs/s{_spread(rounds['engine'])} "
        f"({divergent} of {n} programs diverge)"
    )
    if "ratio_2workers" in fig:
        log(
            f"    two workers:                 {fig['engine_2workers_pps']:8.1f} programs/s"
            f"{_spread(rounds['engine_2workers'])}; {fig['ratio_2workers']:.2f}x one"
        )
    # Where the CPU goes (the middle engine run): one worker already keeps more than one core
    # busy (its targets compute while it draws the next chunk), and that is the CPU a second
    # worker on a 2-core machine competes for.
    fig["cpu_ms_per_program"] = {k: v / n * 1e3 for k, v in cpu.items()}
    fig["cores_used_1worker"] = sum(cpu.values()) / seconds
    log(
        "    CPU per program: "
        + ", ".join(f"{k} {v:.2f} ms" for k, v in fig["cpu_ms_per_program"].items())
        + f"; one worker keeps {fig['cores_used_1worker']:.2f} cores busy"
    )


def _baseline_figures(fig: dict[str, Any], engine: Engine, config: BenchConfig, log) -> None:
    """The engine without its overlap, and the naive spawn-per-program baseline."""
    seconds, n = measure_engine_serial(engine, config)
    fig["engine_serial_pps"] = n / seconds
    log(f"    engine (serial, no overlap): {fig['engine_serial_pps']:8.1f} programs/s")

    spawn_programs = generate(config.spawn_programs, chunk_seed(config.seed, 0), config.profile)
    seconds = measure_spawn(engine.runner.targets, spawn_programs)
    fig["spawn_pps"] = len(spawn_programs) / seconds
    log(f"(c) spawn per program:           {fig['spawn_pps']:8.2f} programs/s")

    fig["ratio_spawn"] = fig["engine_pps"] / fig["spawn_pps"]
    log(
        f"(b)/(a) = {fig['ratio_ceiling']:.2f} (target >= {CEILING_TARGET});  "
        f"(b)/(c) = {fig['ratio_spawn']:.0f} (target >= 20)"
    )


def _cost_figures(fig: dict[str, Any], engine: Engine, config: BenchConfig, log) -> None:
    """Per target, per program length, and memory over a long run."""
    sample = generate(config.chunk_size, chunk_seed(config.seed, 0), config.profile)
    fig["per_target"] = measure_per_target(engine.runner.targets, sample)
    for tid, v in fig["per_target"].items():
        log(
            f"    {tid:<22} {v['wall_s_per_program'] * 1e3:7.2f} ms/program wall, "
            f"{v['probe_s_per_program'] * 1e3:7.2f} ms in the probe"
        )

    run_cost, gen_cost = measure_lengths(engine, config)
    fig["per_length"] = {str(k): v for k, v in run_cost.items()}
    fig["per_length_generate"] = {str(k): v for k, v in gen_cost.items()}
    log(
        "    per program by length (run + oracle | generation): "
        + "; ".join(f"{k} ops {run_cost[k] * 1e3:.1f} | {gen_cost[k] * 1e3:.1f} ms" for k in LENGTHS)
    )

    if config.rss_programs:
        log(f"    rss over {config.rss_programs} programs:")
        fig["rss"] = measure_rss(engine, config, log)
        # Growth after the first chunk (the probes allocate their working set there).
        first, last = fig["rss"][min(1, len(fig["rss"]) - 1)], fig["rss"][-1]
        fig["rss_growth_kib"] = {
            k: (last[k] - first[k]) if last.get(k) and first.get(k) else None for k in first if k != "programs"
        }
