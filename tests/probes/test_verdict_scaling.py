"""Verdicts scale with the program (issue 40, fault 16): ``trace.verdicts`` gives the same verdicts
as the straightforward computation below, and does not ask every op about every relation.

The straightforward computation (``reference_verdicts``) is the definition the verdicts had when
each relation walked every later op: its relation ends at the first later op that rebinds the
snapshot or makes its source another object (``ops.rebinds``, ``ops.denotes_another_object``),
and every op before that which changed either name, read from the full state after each op
(``Trace.state_after``), is an event. Its cost is the program's length squared, which is why
``verdicts`` no longer does it that way (tests/bench_verdicts.py prints the times).

The tests of this subject that run in-process are in tests/unit/judging/test_verdict_scaling.py.
"""

from __future__ import annotations

import pytest

from harness.fuzzing.generation import generate
from tests.conftest import targets_runner
from tests.support.verdict_scaling import (
    assert_same_verdicts,
)

# ---------------------------------------------------------------------------------------------
# The reference: each relation walks every later op.


@pytest.mark.timeout(300)
def test_verdicts_equal_the_reference_on_torch_traces_of_generated_programs():
    programs = generate(40, seed=11, profile="default")
    events = 0
    with targets_runner(("torch:cpu",)) as runner:
        for program in programs:
            traces = runner.run_one(program, every_target=True)
            events += assert_same_verdicts(program, traces["torch:cpu"])
    assert events > 20
