"""Leaf strategies that cost one primitive draw, and ``FastDraw``, the ``draw`` a program is
drawn with.

A program takes some 70 draws, nearly all of them a pick from a fixed menu. Through
``ConjectureData.draw`` each pays for Hypothesis's strategy machinery (validation, unwrapping,
value re-encoding, ``sampled_from``'s filter loop, a span more for every ``.map``): several times
the primitive draw itself. The leaves here make exactly the choice of their Hypothesis
equivalents, so a choice sequence gives the same values either way:

- ``Menu(items)``: one integer in ``0..n-1``, shrinking to the first item (``sampled_from``);
- ``Flag()``: one boolean (``booleans()``);
- ``Count(lo, hi)``: one integer in ``lo..hi`` (``integers(lo, hi)``, unweighted up to 127 apart);
- ``Bytes(n, fn)``: ``n`` bytes, passed through ``fn`` (``binary(min_size=n, max_size=n).map(fn)``).

``FastDraw`` draws a leaf as its primitive inside one span of the leaf's label, and anything
else through ``data.draw``. The spans are what Hypothesis's mutator (``mutator_groups``: parts of
one label copied over each other) and shrinker work on, so every leaf keeps one; leaves of the
same kind share a label (every pick of a method, every index among ``n`` names).

Invariant: drawn through ``data.draw`` (a leaf is a ``SearchStrategy``: ``@given`` takes it) or
through ``FastDraw``, a leaf gives the same value for the same choices.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any
from weakref import WeakKeyDictionary

from hypothesis.internal.conjecture.data import ConjectureData
from hypothesis.internal.conjecture.utils import calc_label_from_name
from hypothesis.strategies import SearchStrategy


class Leaf(SearchStrategy):
    """A strategy whose ``do_draw`` is one primitive draw, labelled by ``name``."""

    def __init__(self, name: str):
        super().__init__()
        self.leaf_label = calc_label_from_name(f"aliasfuzz leaf {name}")

    def calc_label(self) -> int:
        return self.leaf_label


class Menu(Leaf):
    def __init__(self, items: Sequence[Any], name: str):
        super().__init__(f"menu {name}")
        self.items = tuple(items)
        if not self.items:
            raise ValueError(f"menu {name!r} has no items")
        self.last = len(self.items) - 1

    def do_draw(self, data: ConjectureData) -> Any:
        return self.items[data.draw_integer(0, self.last)]

    def __repr__(self) -> str:
        return f"Menu({self.items!r})"


class Flag(Leaf):
    def __init__(self):
        super().__init__("flag")

    def do_draw(self, data: ConjectureData) -> bool:
        return data.draw_boolean()

    def __repr__(self) -> str:
        return "Flag()"


class Count(Leaf):
    def __init__(self, lo: int, hi: int):
        if not lo <= hi <= lo + 127:
            raise ValueError(f"Count({lo}, {hi}): integers() weights its bounds beyond 127 apart")
        super().__init__(f"count {lo} {hi}")
        self.lo, self.hi = lo, hi

    def do_draw(self, data: ConjectureData) -> int:
        return data.draw_integer(self.lo, self.hi)

    def __repr__(self) -> str:
        return f"Count({self.lo}, {self.hi})"


class Bytes(Leaf):
    def __init__(self, n: int, fn: Callable[[bytes], Any], name: str):
        super().__init__(f"bytes {n} {name}")
        self.n, self.fn = n, fn

    def do_draw(self, data: ConjectureData) -> Any:
        return self.fn(data.draw_bytes(self.n, self.n))

    def __repr__(self) -> str:
        return f"Bytes({self.n}, {self.fn.__name__})"


class FastDraw:
    """``draw(strategy)`` on one ``ConjectureData``: a ``Leaf`` as its primitive in a span of its
    label, any other strategy through ``data.draw``. ``span(label)`` and ``end()`` open and
    close a span around a group of draws (the declarations, the layers).

    It also keeps the spans it opened, by label, in choice indices: a leaf is exactly one choice,
    so counting leaves is counting choices, and ``finish()`` records for ``mutator_groups`` the
    groups Hypothesis would compute from the finished data's spans, without walking them. A draw
    through ``data.draw`` makes the count unknown, and then nothing is recorded."""

    __slots__ = ("data", "count", "exact", "_open", "_spans")

    def __init__(self, data: ConjectureData):
        self.data = data
        self.count = len(data.choices)  # choices drawn before this one (none at the top level)
        self.exact = True
        self._open: list[tuple[int, int]] = []  # (label, first choice) of each open span()
        self._spans: dict[int, set[tuple[int, int]]] = {}  # label -> (start, end) of its spans

    def __call__(self, strategy: SearchStrategy) -> Any:
        if isinstance(strategy, Leaf):
            data, start = self.data, self.count
            data.start_span(strategy.leaf_label)
            try:
                value = strategy.do_draw(data)
            finally:
                data.stop_span()
            self.count = start + 1
            self._spans.setdefault(strategy.leaf_label, set()).add((start, start + 1))
            return value
        self.exact = False
        return self.data.draw(strategy)

    def span(self, label: int) -> None:
        self.data.start_span(label)
        # A label's group is made when its first span starts: the groups are then in the order
        # Hypothesis lists them (labels by first start), which the mutator's random pick depends on.
        self._spans.setdefault(label, set())
        self._open.append((label, self.count))

    def end(self) -> None:
        self.data.stop_span()
        label, start = self._open.pop()
        self._spans[label].add((start, self.count))

    def finish(self) -> None:
        """Records this draw's mutator groups for ``mutator_groups(data)``, when they are known."""
        if self.exact and not self._open:
            _GROUPS[self.data] = [g for g in self._spans.values() if len(g) >= 2]


_GROUPS: WeakKeyDictionary = WeakKeyDictionary()


def mutator_groups(data: ConjectureData) -> list[set[tuple[int, int]]]:
    """Hypothesis's ``data.spans.mutator_groups`` (the spans of one label, as (start, end) choice
    indices, where a label has two or more), from what ``FastDraw.finish`` recorded when the data's
    one top-level draw was made through one ``FastDraw``; else from Hypothesis's spans. Walking the
    spans was a fifth of the cost of drawing a program. ``tests/unit/fuzzing/test_choices.py`` checks that the
    two agree on drawn programs."""
    groups = _GROUPS.get(data)
    return groups if groups is not None else data.spans.mutator_groups
