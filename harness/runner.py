"""Runs programs on a set of targets: every target at once, programs in pipelined batches."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

from .ir import Program
from .targets.base import Target
from .trace import Trace


class _InFlight:
    """The batch the targets are running, if any. A runner and its subsets share one: the
    processes take one batch at a time, so submitting another first waits for this one (its
    results stay with its ``collect``)."""

    def __init__(self) -> None:
        self.collect: Callable[[], list[dict[str, Trace]]] | None = None

    def drain(self) -> None:
        if self.collect is not None:
            collect, self.collect = self.collect, None
            collect()


class Runner:
    """One thread per target: each thread only waits on its own process's pipe, so the targets
    compute concurrently while the GIL is free."""

    def __init__(self, targets: Sequence[Target]):
        self.targets = list(targets)
        self._pool = ThreadPoolExecutor(max_workers=max(1, len(self.targets)), thread_name_prefix="target")
        self._owner = True
        self._flight = _InFlight()

    @property
    def ids(self) -> list[str]:
        return [t.id for t in self.targets]

    @property
    def infos(self) -> dict:
        """Target id -> ``TargetInfo`` (versions, devices, supported ops)."""
        return {t.id: t.info for t in self.targets}

    def run(self, programs: Sequence[Program], *, every_target: bool = False) -> list[dict[str, Trace]]:
        """One ``{target id: trace}`` per program, in program order."""
        return self.submit(programs, every_target=every_target)()

    def submit(self, programs: Sequence[Program], *,
               every_target: bool = False) -> Callable[[], list[dict[str, Trace]]]:
        """Starts ``programs`` on every target and returns at once; calling the result waits for
        the traces (as ``run`` returns them; calling it again returns the same lists). A batch
        still in flight on these processes (from this runner or a subset) is waited for first,
        so a consumer may run programs while a pipeline has submitted the next chunk.

        A variant target whose plain device runs here too is only sent the programs it is
        ``needed`` for (those with an op it declares it ``differs_on``); the others have no trace
        from it, so the oracle does not compare it there. ``every_target`` runs every program
        everywhere (a replayed case shows every column)."""
        if not programs:
            return lambda: []
        self._flight.drain()
        wires = [p.to_wire() for p in programs]
        futures = []
        ids = {t.id for t in self.targets}
        for t in self.targets:
            plain = t.info.plain_id
            if every_target or t.info.differs_on is None or plain == t.id or plain not in ids:
                picked = None
            else:
                picked = [i for i, p in enumerate(programs) if t.needed(p)]
            if picked is None:
                futures.append((t.id, range(len(programs)), self._pool.submit(t.run_wire, wires)))
            elif picked:
                futures.append((t.id, picked, self._pool.submit(t.run_wire, [wires[i] for i in picked])))
        done: list[list[dict[str, Trace]]] = []

        def collect() -> list[dict[str, Trace]]:
            if not done:
                per_program: list[dict[str, Trace]] = [{} for _ in programs]
                for tid, picked, f in futures:
                    for i, trace in zip(picked, f.result()):
                        per_program[i][tid] = trace
                done.append(per_program)
            if self._flight.collect is collect:
                self._flight.collect = None
            return done[0]

        self._flight.collect = collect
        return collect

    def subset(self, ids: Sequence[str]) -> "Runner":
        """A runner over some of these targets (sharing their processes; closing it closes
        nothing)."""
        sub = Runner.__new__(Runner)
        sub.targets = [t for t in self.targets if t.id in ids]
        sub._pool = self._pool
        sub._owner = False
        sub._flight = self._flight
        return sub

    def run_one(self, program: Program, *, every_target: bool = False) -> dict[str, Trace]:
        return self.run([program], every_target=every_target)[0]

    def close(self) -> None:
        if not self._owner:
            return
        self._pool.shutdown(wait=False)
        for t in self.targets:
            t.close()
