"""The leaf strategies of ``generators.choices``: the same choices and values as the Hypothesis
strategies they stand for, through ``data.draw`` and through ``FastDraw`` alike, and the spans
a drawn program keeps for Hypothesis's mutator and shrinker."""

from __future__ import annotations

from random import Random

import pytest
from hypothesis import strategies as st
from hypothesis.control import BuildContext
from hypothesis.internal.conjecture.data import ConjectureData

from generators.choices import Bytes, Count, FastDraw, Flag, Menu
from generators.programs import _menu, get_profile, programs


def _draw(data: ConjectureData, draw):
    with BuildContext(data, wrapped_test=lambda: None):
        return draw()


@pytest.mark.parametrize(
    "leaf, equivalent",
    [
        (Menu(("a", "b", "c", "d"), "test"), st.sampled_from(("a", "b", "c", "d"))),
        (Flag(), st.booleans()),
        (Count(2, 9), st.integers(2, 9)),
        (Bytes(3, tuple, "test"), st.binary(min_size=3, max_size=3).map(tuple)),
    ],
    ids=["menu", "flag", "count", "bytes"],
)
def test_a_leaf_makes_the_choice_of_the_strategy_it_stands_for(leaf, equivalent):
    seen = set()
    for seed in range(40):
        hyp = ConjectureData(random=Random(seed))
        expected = _draw(hyp, lambda: hyp.draw(equivalent))
        via_draw = ConjectureData.for_choices(hyp.choices)
        via_fast = ConjectureData.for_choices(hyp.choices)
        assert _draw(via_draw, lambda: via_draw.draw(leaf)) == expected
        assert _draw(via_fast, lambda: FastDraw(via_fast)(leaf)) == expected
        assert via_draw.choices == via_fast.choices == hyp.choices
        seen.add(expected)
    assert len(seen) > 1  # the seeds did draw different values


def test_a_menu_shrinks_to_its_first_item_and_refuses_to_be_empty():
    data = ConjectureData.for_choices((0,))
    assert _draw(data, lambda: FastDraw(data)(Menu(("first", "second"), "test"))) == "first"
    with pytest.raises(ValueError, match="no items"):
        Menu((), "empty")
    with pytest.raises(ValueError, match="127"):
        Count(0, 200)  # integers() weights its bounds there: not the same choice


def test_fast_draw_keeps_a_span_per_leaf():
    data = ConjectureData(random=Random(3))
    program = _draw(data, lambda: data.draw(programs("default")))
    data.freeze()
    # every choice lies inside a leaf's span of its own: no draw escapes the spans
    leaves = [s for s in data.spans if s.choice_count == 1 and not s.children]
    assert len(leaves) == len(data.choices)
    # the op kinds share a label, one group of the mutator: an op's kind can be copied over another's
    kinds = {(s.start, s.end) for s in data.spans if s.label == _menu(get_profile("default")).leaf_label}
    assert len(kinds) >= len(program.ops) > 1
    assert kinds in data.spans.mutator_groups


def test_recorded_mutator_groups_are_hypothesiss_own_in_the_same_order():
    # generation.generate mutates from FastDraw's record instead of walking the spans; the
    # mutator picks a group at random, so the order matters as much as the groups.
    from generators.choices import _GROUPS, mutator_groups

    compared = 0
    for seed in range(150):
        for profile in ("default", "deep"):
            data = ConjectureData(random=Random(seed))
            _draw(data, lambda: data.draw(programs(profile)))
            data.freeze()
            assert data in _GROUPS
            assert mutator_groups(data) == data.spans.mutator_groups, (seed, profile)
            compared += 1
    assert compared == 300


def test_a_draw_outside_fast_draw_leaves_the_groups_to_hypothesis():
    from generators.choices import _GROUPS, mutator_groups

    data = ConjectureData(random=Random(1))

    def mixed():
        draw = FastDraw(data)
        draw(Flag())
        draw(st.integers(0, 3))  # not a leaf: its choices are not counted
        draw.finish()

    _draw(data, mixed)
    data.freeze()
    assert data not in _GROUPS
    assert mutator_groups(data) == data.spans.mutator_groups
