"""Runs programs on a set of targets: every target at once, programs in pipelined batches.

Every wait is bounded and can be cut short from any thread: ``Runner.cancel()`` (for good) or
``Runner.set_deadline(t)`` (``time.monotonic()``) make the batches in flight return within about a
second, the processes they waited on killed, and the programs cut off get ``CANCELLED`` traces.
``close()`` cancels first, so it returns within seconds even while a batch is in flight, and the
runner's threads end (the interpreter's at-exit join of them never hangs).
"""

from __future__ import annotations

import threading
import weakref
import zlib
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait

from harness.case.ir import Program
from harness.targets.base import CANCELLED, Cancellation, EncodedProgram, Target
from harness.targets.trace import Trace

#: How long ``close`` waits for the batches in flight to see its cancellation.
CLOSE_WAIT_S = 5.0

# Every owning runner's cancellation, cancelled before the interpreter joins the runners' threads
# at exit (a runner never closed, e.g. left behind by an exception, must not keep it waiting).
_LIVE: weakref.WeakSet[Cancellation] = weakref.WeakSet()


def _cancel_all_at_exit() -> None:
    for c in list(_LIVE):
        c.cancel()


try:  # called before threads are joined; after concurrent.futures' own hook is registered, so first
    threading._register_atexit(_cancel_all_at_exit)  # type: ignore[attr-defined]
except (AttributeError, RuntimeError):
    pass


class _InFlight:
    """The batches the targets are running or have queued. A runner and its subsets share one.
    ``collect`` is the last submitted batch's; ``futures`` are those not yet done."""

    def __init__(self) -> None:
        self.collect: Callable[[], list[dict[str, Trace]]] | None = None
        self.futures: set[Future] = set()
        self.lock = threading.Lock()

    def drain(self) -> None:
        """Waits until every batch submitted so far is done (their results stay with their
        ``collect``)."""
        if self.collect is not None:
            collect, self.collect = self.collect, None
            collect()
        wait(self.pending())

    def add(self, future: Future) -> None:
        with self.lock:
            self.futures.add(future)
        future.add_done_callback(self._done)

    def _done(self, future: Future) -> None:
        with self.lock:
            self.futures.discard(future)

    def pending(self) -> list[Future]:
        with self.lock:
            return list(self.futures)


class _Batch:
    """``Runner.submit``'s result: calling it waits for the batch's traces, once. A class rather
    than a closure: a closure that names itself is a reference cycle, and a cycle holding a
    chunk's traces (thousands of objects) is freed only by the cyclic garbage collector, whose
    passes over them then cost the worker more than judging them."""

    __slots__ = ("_flight", "_n", "_futures", "_done")

    def __init__(self, flight: _InFlight, n: int, futures: list[tuple[str, Sequence[int], Future | None]]):
        self._flight, self._n, self._futures = flight, n, futures
        self._done: list[dict[str, Trace]] | None = None

    def __call__(self) -> list[dict[str, Trace]]:
        if self._done is None:
            per_program: list[dict[str, Trace]] = [{} for _ in range(self._n)]
            for tid, picked, f in self._futures:
                traces = _cancelled(tid, len(picked)) if f is None or f.cancelled() else f.result()
                for i, trace in zip(picked, traces):
                    per_program[i][tid] = trace
            self._done, self._futures = per_program, []
        if self._flight.collect is self:
            self._flight.collect = None
        return self._done


def _cancelled(target_id: str, n: int) -> list[Trace]:
    return [Trace.failed(target_id, CANCELLED, f"{target_id}: cancelled before it gave a trace") for _ in range(n)]


def share_key(target_id: str) -> str:
    """What a share of the programs is given to: a variant by its name (``compile``, on every
    device), a device target by its id (``burn:wgpu``)."""
    return target_id.partition("+")[2] or target_id


def in_share(program: Program, share: float) -> bool:
    """Whether ``program`` is among the ``share`` of programs a target runs. Decided by the
    program's key, so one program is in or out wherever and whenever it is drawn (a resumed
    campaign, another machine of a shared one)."""
    return share >= 1.0 or zlib.crc32(program.key().encode()) < share * 2**32


class Runner:
    """One thread per target: each thread only waits on its own process's pipe, so the targets
    compute concurrently while the GIL is free. A target's batches run in the order they were
    submitted (its thread is its queue), so a batch can be submitted while another is in flight:
    each target starts on it as soon as it is done with the one before, without waiting for the
    slowest target or for the caller."""

    def __init__(self, targets: Sequence[Target]):
        self.targets = list(targets)
        self._pools = {t.id: ThreadPoolExecutor(max_workers=1, thread_name_prefix="target") for t in self.targets}
        self._owner = True
        self._flight = _InFlight()
        self._cancel = Cancellation()
        _LIVE.add(self._cancel)

    @property
    def ids(self) -> list[str]:
        return [t.id for t in self.targets]

    @property
    def infos(self) -> dict:
        """Target id -> ``TargetInfo`` (versions, devices, supported ops)."""
        return {t.id: t.info for t in self.targets}

    # -- cancellation ---------------------------------------------------------------------------

    def cancel(self) -> None:
        """From any thread: every batch in flight returns within about a second (its processes
        killed, the programs without a trace get ``CANCELLED`` traces), and every later one at
        once, all-``CANCELLED``. For good: a cancelled runner runs nothing more. Shared with the
        runner's subsets (and theirs with it)."""
        self._cancel.cancel()

    def set_deadline(self, t: float | None) -> None:
        """From any thread: from ``t`` (``time.monotonic()``) on, batches are cancelled as by
        ``cancel``; None removes the deadline (a later one may replace it). Shared with subsets."""
        self._cancel.deadline = t

    @property
    def cancelled(self) -> bool:
        """Whether ``cancel`` was called or the deadline has passed."""
        return self._cancel.cancelled

    # -- running --------------------------------------------------------------------------------

    def run(
        self, programs: Sequence[Program], *, every_target: bool = False, shares: Mapping[str, float] | None = None
    ) -> list[dict[str, Trace]]:
        """One ``{target id: trace}`` per program, in program order."""
        return self.submit(programs, every_target=every_target, shares=shares)()

    def submit(
        self, programs: Sequence[Program], *, every_target: bool = False, shares: Mapping[str, float] | None = None
    ) -> Callable[[], list[dict[str, Trace]]]:
        """Starts ``programs`` on every target and returns at once; calling the result waits for
        the traces (as ``run`` returns them; calling it again returns the same lists). On each
        target they run after the batches submitted before (from this runner or a subset), so a
        consumer may run programs while a pipeline has submitted the next chunks.

        A variant target whose plain device runs here too is only sent the programs it is
        ``needed`` for (those with an op it declares it ``differs_on``), and of those only its
        share (``shares``: variant name -> share, ``in_share``). A device target with a share
        (``shares``: target id -> share, a costly backend such as ``burn:wgpu``) is sent that
        share of the programs, where another target runs too. A target has no trace of the
        programs it was not sent, so the oracle does not compare it there. ``every_target`` runs
        every program everywhere (a replayed case shows every column).

        Once cancelled (``cancel``, the deadline, ``close``), every trace is ``CANCELLED``."""
        if not programs:
            return lambda: []
        wires = [EncodedProgram(p.to_wire()) for p in programs]
        plan: list[tuple[Target, Sequence[int]]] = []
        ids = {t.id for t in self.targets}
        for t in self.targets:
            plain = t.info.plain_id
            variant = t.info.differs_on is not None and plain != t.id and plain in ids
            # A variant alone on its device runs everything, as does a device target alone.
            key = share_key(t.id)
            share = (shares or {}).get(key, 1.0) if variant or (key == t.id and len(ids) > 1) else 1.0
            if every_target or (not variant and share >= 1.0):
                plan.append((t, range(len(programs))))
            else:
                picked = [i for i, p in enumerate(programs) if (not variant or t.needed(p)) and in_share(p, share)]
                if picked:
                    plan.append((t, picked))
        futures: list[tuple[str, Sequence[int], Future | None]] = []
        for t, picked in plan:
            future = None
            if not self._cancel.cancelled:
                try:
                    future = self._pools[t.id].submit(t.run_wire, [wires[i] for i in picked], self._cancel)
                except RuntimeError:  # the pool is shut down: the runner is closed
                    future = None
            if future is not None:
                self._flight.add(future)
            futures.append((t.id, picked, future))
        batch = _Batch(self._flight, len(programs), futures)
        self._flight.collect = batch
        return batch

    def subset(self, ids: Sequence[str]) -> Runner:
        """A runner over some of these targets (sharing their processes, their batch in flight
        and their cancellation; closing it closes nothing)."""
        sub = Runner.__new__(Runner)
        sub.targets = [t for t in self.targets if t.id in ids]
        sub._pools = self._pools
        sub._owner = False
        sub._flight = self._flight
        sub._cancel = self._cancel
        return sub

    def restart(self) -> None:
        """Starts every target's process afresh, once the batches in flight (if any) are done: what
        a finding is confirmed on, so that nothing a process kept from earlier programs (an
        allocator's reuse, a cache, a leaked handle) enters the run."""
        self._flight.drain()
        for t in self.targets:
            t.restart()

    def run_one(self, program: Program, *, every_target: bool = False) -> dict[str, Trace]:
        return self.run([program], every_target=every_target)[0]

    def close(self) -> None:
        """Cancels what is in flight (see ``cancel``), waits up to ``CLOSE_WAIT_S`` for it to
        return, and stops every target process (their process groups killed when they do not
        exit). Returns within seconds, whatever the processes do; safe to call twice."""
        if not self._owner:
            return
        self._cancel.cancel()
        wait(self._flight.pending(), timeout=CLOSE_WAIT_S)
        for pool in self._pools.values():
            pool.shutdown(wait=False, cancel_futures=True)
        for t in self.targets:
            t.close()
