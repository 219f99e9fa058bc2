"""CPython's cyclic garbage collector, set for a process whose heap is mostly long-lived (the
modules it imported: Hypothesis, torch) and whose work makes many small, short-lived objects (a
chunk's traces in the worker, a program's observations in the torch target).

With CPython's settings (the youngest generation collected every 700 allocations) the collector
scans those objects several times before reference counting frees them, and every full
collection walks the whole long-lived heap: a sixth of the worker's CPU in ``aliasfuzz bench``,
about 6% of the torch target's. Reference counting frees what it frees either way; only the
collector's passes change.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

#: Allocations (less deallocations) between two collections of the youngest generation.
YOUNG_THRESHOLD = 50_000


def set_for_long_lived_heap() -> None:
    """What is alive now is frozen out of the collector's passes (``gc.freeze``: it is never
    collected, so call this once the imports are done), and the youngest generation is
    collected every ``YOUNG_THRESHOLD`` allocations. For a process's whole life."""
    gc.freeze()
    threshold = gc.get_threshold()
    gc.set_threshold(max(YOUNG_THRESHOLD, threshold[0]), *threshold[1:])


@contextlib.contextmanager
def long_lived_heap() -> Iterator[None]:
    """``set_for_long_lived_heap`` for the ``with`` block, both undone on exit."""
    threshold = gc.get_threshold()
    set_for_long_lived_heap()
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()
