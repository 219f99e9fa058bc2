"""Drawing programs (harness/fuzzing/generation.py): the direct path campaigns use, against the
``@given`` loop it replaced, and the invariants both keep: a seed gives the same programs, and a
program's recorded choices replay to that very program, so Hypothesis's shrinker starts from it.

The campaign test runs the real command line on the TEST DOUBLE fake probe (tests/fakes/), which
logs every program it is given: the programs a campaign runs depend on the seed alone, not on
the number of workers or on a kill and resume in between.

The tests here run in this process, as the
unit tier requires; those that need real processes are in tests/e2e/test_generation.py.
"""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis.control import BuildContext
from hypothesis.internal.conjecture.data import ConjectureData

from generators.programs import get_profile, programs
from harness.case.ir import check_program
from harness.fuzzing.engine import chunk_seed, hypothesis_shrink
from harness.fuzzing.generation import generate, generate_given
from harness.shrinking.minimize import cost


def replay(choices: tuple, profile: str):
    data = ConjectureData.for_choices(choices)
    with BuildContext(data, wrapped_test=lambda: None):
        return data.draw(programs(get_profile(profile)))


@pytest.mark.parametrize("drawer", [generate, generate_given])
@pytest.mark.parametrize("profile", ["quick", "default", "lazy"])
def test_recorded_choices_replay_to_the_program_drawn(drawer, profile):
    choices: dict[str, tuple] = {}
    drawn = drawer(40, chunk_seed(3, 1), profile, choices=choices)
    assert len(drawn) == 40 and set(choices) == {p.key() for p in drawn}
    for p in drawn:
        check_program(p.tensors, p.ops, layers=p.layers)  # valid by construction; a drawer never bypasses the checks
        assert replay(choices[p.key()], profile).key() == p.key()


def test_a_seed_gives_the_same_programs_and_another_seed_others():
    a = [p.key() for p in generate(64, chunk_seed(9, 0), "default")]
    assert a == [p.key() for p in generate(64, chunk_seed(9, 0), "default")]
    assert len(set(a)) == 64  # random draws: no program twice in a chunk here
    b = [p.key() for p in generate(64, chunk_seed(9, 1), "default")]
    assert not set(a) & set(b)


def test_the_direct_draw_covers_the_op_menu_as_the_given_loop_does():
    # Same strategy, other driver: every op kind either path draws, the other draws too.
    def kinds(drawer):
        return {op["op"] for k in range(6) for p in drawer(64, chunk_seed(4, k), "default") for op in p.ops}

    direct, given = kinds(generate), kinds(generate_given)
    assert direct == given
    assert direct >= {kind for kind, w in get_profile("default").weights if w}


def test_hypothesis_shrinks_a_directly_drawn_program_from_its_choices():
    choices: dict[str, tuple] = {}
    drawn = generate(64, chunk_seed(5, 0), "default", choices=choices)
    program = next(p for p in drawn if len(p.ops) >= 6 and any(op["op"] == "step" for op in p.ops))

    def shows(candidates):
        return [any(op["op"] == "step" for op in c.ops) for c in candidates]

    smallest, runs = hypothesis_shrink(program, choices[program.key()], "default", None, shows, 30.0)
    assert runs > 1  # it replayed the program, then tried simpler ones
    # Simpler, and still showing. (Hypothesis leaves the length: the strategy draws lengths
    # longest first, so its shrinker does not cut ops; the domain pass after it does.)
    assert cost(smallest) < cost(program) and shows([smallest]) == [True]


def test_a_shape_is_one_draw_over_every_shape_simplest_first():
    from generators.programs import _shape_menu, shapes

    menu = _shape_menu()
    every = {s for r in (1, 2, 3) for s in itertools.product((1, 2, 3), repeat=r)}
    assert set(menu) == every
    # the shrinker lowers the index: the lower, the simpler (rank, then size)
    order = [(len(s), math.prod(s)) for s in menu]
    assert order == sorted(order) and menu[0] == (1,)
    # each rank about as often as the list of sides gave it (two, one and two in five)
    share = {r: sum(len(s) == r for s in menu) / len(menu) for r in (1, 2, 3)}
    assert share == pytest.approx({1: 0.4, 2: 0.2, 3: 0.4}, abs=0.01)
    # one choice per shape in a drawn program's choice sequence
    data = ConjectureData.for_choices((len(menu) - 1,))
    with BuildContext(data, wrapped_test=lambda: None):
        assert data.draw(shapes) == (3, 3, 3)
    assert len(data.choices) == 1
