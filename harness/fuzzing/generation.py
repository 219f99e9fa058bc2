"""Drawing chunks of programs from the ``programs()`` strategy, with Hypothesis.

Two paths draw from the same strategy; both are deterministic for a seed and a version, and both
can record each program's choice sequence, from which Hypothesis's shrinker starts
(``engine.hypothesis_shrink``):

- ``generate`` (what campaigns use): programs drawn through a ``ConjectureData`` each, all from
  one ``random.Random(seed)``: a random draw, then mutants of it made by Hypothesis's own
  generation mutator (``_mutant``), as the runner's generate phase makes them. What it leaves out
  is the runner's per-example bookkeeping (data tree, novel prefixes, cache, health checks) and
  its opening examples (the simplest program, then a few small ones, in every chunk); it draws
  about 1.3 to 1.8 times as many programs a second (``tests/bench_generation.py``).
- ``generate_given``: the ``@given`` loop with ``max_examples = n``. Kept as the benchmark's
  "ceiling" and as the path to compare ``generate`` against (``tests/bench_generation.py``).

Invariant: a program's recorded choices replay to that same program through the strategy, so
the shrinker's first example is the program that was found.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hyp_seed
from hypothesis.control import BuildContext, _current_build_context
from hypothesis.errors import StopTest
from hypothesis.internal.conjecture.data import ConjectureData

from generators.choices import mutator_groups
from generators.programs import Profile, get_profile
from generators.programs import programs as program_strategy
from harness.case.ir import Program

#: A drawer: ``(n, seed, profile, max_ops, choices) -> programs``.
Drawer = Callable[..., list[Program]]

#: Random draws in a row that Hypothesis may give up on (``StopTest``: the choice sequence ran
#: over its limit) before ``generate`` takes the strategy to be broken; the strategy bounds every
#: list, so in practice none is given up on.
MAX_GIVEN_UP = 1000


def generate(
    n: int,
    seed: int,
    profile: str | Profile = "default",
    max_ops: int | None = None,
    choices: dict[str, tuple] | None = None,
) -> list[Program]:
    """``n`` distinct programs: random draws, each followed by up to ``MUTATION_TRIES`` mutants
    (``_mutant``), each mutant built on the last one kept, as Hypothesis's generate phase does.

    With ``choices``, records each program's choice sequence (keyed by ``Program.key()``)."""
    strategy = program_strategy(get_profile(profile), max_ops)
    rng = random.Random(seed)
    out: dict[str, Program] = {}
    given_up = 0

    def keep(data: ConjectureData, program: Program) -> bool:
        key = program.key()
        if key in out:
            return False
        out[key] = program
        if choices is not None:
            choices[key] = tuple(data.choices)
        return True

    while len(out) < n:
        drawn = _draw(strategy, ConjectureData(random=rng))
        if drawn is None:
            given_up += 1
            if given_up > MAX_GIVEN_UP:
                raise RuntimeError(f"the programs() strategy gave up {given_up} draws in a row")
            continue
        given_up = 0
        keep(*drawn)
        data = drawn[0]
        for _ in range(MUTATION_TRIES):
            if len(out) >= n:
                break
            attempt = _mutant(data.choices, mutator_groups(data), rng)
            if attempt is None or attempt == data.choices:
                continue  # a part copied over an equal one: the same program, not drawn again
            # A mutant that needs more choices than the attempt holds (a longer op list copied
            # over a shorter one) overruns and is dropped, as Hypothesis's runner drops it.
            mutant = _draw(strategy, ConjectureData.for_choices(attempt))
            if mutant is not None and keep(*mutant):
                data = mutant[0]  # mutations build on each other, as Hypothesis's do
    return list(out.values())


#: Mutants tried per random draw: Hypothesis's runner tries up to six
#: (``ConjectureRunner.generate_mutations_from``).
MUTATION_TRIES = 6


def _draw(strategy, data: ConjectureData) -> tuple[ConjectureData, Program] | None:
    """A program drawn through ``data``, or None where Hypothesis gives up on it (the choice
    sequence ran out or over its limit)."""
    try:
        with BuildContext(data, wrapped_test=_nothing):
            program = data.draw(strategy)
    except StopTest:
        return None
    data.freeze()
    return data, program


def _mutant(choices: tuple, groups: list, rng: random.Random) -> tuple | None:
    """Hypothesis's generation mutator, on a choice sequence: two parts drawn by the same
    strategy (an op kind, a name index, a list of values: a ``mutator_groups`` entry) are made
    the same, one copied over the other; where one part holds the other, the stretch between
    their starts is repeated. Random draws seldom repeat a value or an op; programs that do
    (the same name written twice, a step after a step) are where aliasing shows."""
    if not groups:
        return None
    (start1, end1), (start2, end2) = rng.sample(sorted(rng.choice(groups)), 2)
    if start1 > start2:
        (start1, end1), (start2, end2) = (start2, end2), (start1, end1)
    if start1 <= start2 <= end2 <= end1:
        return choices[:start2] + choices[start1:]
    start, end = rng.choice([(start1, end1), (start2, end2)])
    part = choices[start:end]
    return choices[:start1] + part + choices[end1:start2] + part + choices[end2:]


def generate_given(
    n: int,
    seed: int,
    profile: str | Profile = "default",
    max_ops: int | None = None,
    choices: dict[str, tuple] | None = None,
) -> list[Program]:
    """``n`` programs (fewer if Hypothesis runs out of distinct ones) from Hypothesis's ``@given``
    loop, seeded with ``seed``. With ``choices``, records choice sequences as ``generate`` does."""
    out: list[Program] = []
    datas: list[Any] = []

    @settings(
        max_examples=n,
        database=None,
        phases=[Phase.generate],
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=False,
        report_multiple_bugs=False,
    )
    @hyp_seed(seed)
    @given(program_strategy(get_profile(profile), max_ops))
    def collect(program: Program) -> None:
        out.append(program)
        if choices is not None:
            ctx = _current_build_context.value
            datas.append(ctx.data if ctx is not None else None)

    collect()
    if choices is not None:
        for program, data in zip(out, datas):
            if data is not None:
                choices[program.key()] = tuple(data.choices)
    return out[:n]


def _nothing() -> None:
    """The "test" a build context names: ``generate`` runs none."""
