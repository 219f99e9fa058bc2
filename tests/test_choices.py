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
from generators.programs import _OP_LABEL, programs


def _draw(data: ConjectureData, draw):
    with BuildContext(data, wrapped_test=lambda: None):
        return draw()


@pytest.mark.parametrize("leaf, equivalent", [
    (Menu(("a", "b", "c", "d"), "test"), st.sampled_from(("a", "b", "c", "d"))),
    (Flag(), st.booleans()),
    (Count(2, 9), st.integers(2, 9)),
    (Bytes(3, tuple, "test"), st.binary(min_size=3, max_size=3).map(tuple)),
], ids=["menu", "flag", "count", "bytes"])
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


def test_fast_draw_keeps_a_span_per_leaf_and_per_op():
    data = ConjectureData(random=Random(3))
    program = _draw(data, lambda: data.draw(programs("default")))
    data.freeze()
    ops = [s for s in data.spans if s.label == _OP_LABEL]
    assert len(ops) >= len(program.ops) > 1  # a drawn op that binds nothing adds no op
    # every op span is one group of the mutator, so that one op can be copied over another
    groups = data.spans.mutator_groups
    assert {(s.start, s.end) for s in ops} in groups
    # and every choice lies inside some leaf's span: no draw escapes the spans
    leaves = [s for s in data.spans if s.choice_count == 1 and not s.children]
    assert len(leaves) == len(data.choices)
