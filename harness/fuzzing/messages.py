"""What a campaign worker tells the campaign driver (``campaign.worker_loop`` -> ``_Driver.handle``).

One worker runs in the driver's process and calls the driver directly; several run as processes
and send these through a ``multiprocessing`` queue, so every message is a frozen dataclass of
plain, picklable values, defined at module level (the ``spawn`` context unpickles it by name).
A worker sends ``TargetsOpened`` first and ``WorkerDone`` last (``WorkerDone`` only through the
queue: it ends that worker's share).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.judging.finding import FindingRecord


@dataclass(frozen=True)
class TargetsOpened:
    """The targets the worker opened (target id -> ``TargetInfo.to_json()``) and the frameworks
    it could not open (framework -> why)."""

    targets: dict[str, dict[str, Any]]
    unavailable: dict[str, str]


@dataclass(frozen=True)
class FindingFound:
    """A finding with a signature the worker had not seen: its record (no paths yet: the run
    folder gives them), the minimized and the original case (TOML), and the repro result of the
    minimized case (``ReproResult.to_json``; None when the deadline cut it off)."""

    record: FindingRecord
    minimized: str
    original: str
    repro: dict[str, Any] | None


@dataclass(frozen=True)
class Progress:
    """``programs`` more programs drawn (``repeats`` of them repeats, not run again). ``chunk``:
    the chunk they completed, or None (a corpus replay, or a chunk the deadline cut short, which
    a resume runs again)."""

    programs: int
    chunk: int | None
    repeats: int


@dataclass(frozen=True)
class TargetCosts:
    """Per target id, ``(programs, microseconds)``: more drawn programs it ran, and the time its
    process spent on them (``Engine.target_costs``)."""

    costs: dict[str, tuple[int, int]]


@dataclass(frozen=True)
class RanNowhere:
    """``programs`` more programs that no target ran (every trace a failure)."""

    programs: int


@dataclass(frozen=True)
class LogLine:
    line: str


@dataclass(frozen=True)
class WorkerError:
    """The worker stopped: a set-up problem (``harness`` False) or a bug of aliasfuzz outside
    any one program (``harness`` True)."""

    message: str
    harness: bool


@dataclass(frozen=True)
class WorkerDone:
    worker: int


Message = TargetsOpened | FindingFound | Progress | TargetCosts | RanNowhere | LogLine | WorkerError | WorkerDone
