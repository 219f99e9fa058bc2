"""The first pair of names two identity groupings disagree on (``identity._first_split``, what
``first_divergence`` reports): the same pair as asking every pair in binding order, which is
what ``first_divergence`` did before it was made linear in the names."""

from __future__ import annotations

import random

from harness.judging.identity import _first_split


def every_pair(la: list[int], lb: list[int]) -> tuple[int, int] | None:
    """The definition: the first ``(j, k)``, ``j < k``, one group on one side only."""
    for j in range(len(la)):
        for k in range(j + 1, len(la)):
            if (la[j] == la[k]) != (lb[j] == lb[k]):
                return j, k
    return None


def labels(groups: list[int]) -> list[int]:
    """Group numbers renamed by first appearance (as ``_token_labels`` gives them)."""
    first: dict[int, int] = {}
    return [first.setdefault(g, len(first)) for g in groups]


def test_the_first_split_is_the_first_pair_in_order_on_random_groupings():
    rng = random.Random(40)
    checked = 0
    for _ in range(3000):
        n = rng.randint(2, 12)
        la = labels([rng.randint(0, rng.randint(0, n)) for _ in range(n)])
        lb = list(la)
        for _ in range(rng.randint(1, 3)):  # move a few names to another (or a new) group
            lb[rng.randrange(n)] = rng.randint(0, n)
        lb = labels(lb)
        want = every_pair(la, lb)
        if want is None:
            assert la == lb
            continue
        assert _first_split(la, lb) == want, (la, lb)
        checked += 1
    assert checked > 2000


def test_a_split_and_a_join_late_in_long_groupings():
    n = 5000
    # One side: every name one object; the other: the last name on its own.
    assert _first_split([0] * n, [0] * (n - 1) + [1]) == (0, n - 1)
    # Pairs (2i, 2i+1) on one side; the other joins the last two pairs.
    la = [i // 2 for i in range(n)]
    lb = la[:-2] + [la[-3]] * 2
    assert _first_split(la, lb) == (n - 4, n - 2)
    assert every_pair(la[-8:], lb[-8:]) == (4, 6)
