"""The known-divergence baseline: well-formed, and every entry backed by a case that shows it on
the real targets.

The tests of this subject that run in-process are in tests/unit/fuzzing/test_baseline.py.
"""

from __future__ import annotations

import pytest

from harness.case.case_file import load_case
from harness.fuzzing.replay import run_case
from harness.judging.finding import Finding
from tests.conftest import ROOT
from tests.support.baseline import ALSO_SHOWS, BASELINE, UNEXPLAINED, stem


@pytest.fixture(scope="module")
def case_findings(runner):
    """The findings of a baseline case on every target, each case run once (a metamorphic case:
    both runs)."""
    cache: dict[str, list] = {}

    def findings(case: str) -> list:
        if case not in cache:
            cache[case] = run_case(load_case(ROOT / case), runner, runner.infos).findings
        return cache[case]

    return findings


@pytest.mark.parametrize("entry", BASELINE.entries, ids=lambda e: e.id)
def test_entry_case_shows_a_finding_the_entry_matches(entry, case_findings):
    findings = case_findings(entry.case)
    matched = [f for f in findings if entry.matches(f)]
    assert matched, f"{entry.case} shows none of {entry.id}; it shows {[f.signature for f in findings]}"
    # the first entry that matches is the one reported: an earlier, broader entry must not steal it
    assert any(BASELINE.match(f) is entry for f in matched)


@pytest.mark.parametrize("case", sorted({e.case for e in BASELINE.entries}), ids=stem)
def test_a_case_shows_no_cause_but_its_own_and_the_reviewed_others(case, case_findings):
    """Every finding of a baseline case is its own entries', a reviewed other entry's
    (``ALSO_SHOWS``) or a known candidate (``UNEXPLAINED``), and each reviewed attribution still
    occurs: an entry that grew broad enough to absorb another cause fails here."""
    own = {e.id for e in BASELINE.entries if e.case == case}
    findings: list[Finding] = case_findings(case)
    others = {m.id for f in findings if (m := BASELINE.match(f)) is not None and m.id not in own}
    unexplained = {f.signature for f in findings if BASELINE.match(f) is None}
    assert others == ALSO_SHOWS.get(stem(case), set())
    assert unexplained == UNEXPLAINED.get(stem(case), set())


#: More cases of one entry, each a path of the same cause the entry's own case does not take.
MORE_CASES = {
    # the load_state_dict copy_ into the parameter (pytorch#28318), not a write or an assign
    "torch-parameter-over-an-expansion-refuses-a-write": [
        "tests/cases/torch_load_into_a_parameter_over_an_expansion_fails.toml"
    ],
    # an assign into the moved param, then a backward pass: no tracked tensor at all
    # ... and a backward pass over a product of the moved param before the step
    "burn-step-after-to-device-fails": [
        "tests/cases/burn_step_after_a_move_and_an_assign_fails.toml",
        "tests/cases/burn_step_after_a_move_and_a_backward_of_fails.toml",
    ],
    # tied both ways: the value finding names the chain of the two ties
    "burn-tied-param-is-stepped-in-one-field": ["tests/cases/tied_in_a_cycle_stepped_per_name.toml"],
    "candle-varmap-lists-a-tied-var-twice": ["tests/cases/tied_in_a_cycle_stepped_per_name.toml"],
    # Param::map onto another param's tracked tensor (w.data = l), not Param::from_tensor
    "burn-param-from-a-tracked-tensor-is-its-gradient-node": [
        "tests/cases/burn_param_map_of_another_param_is_its_gradient_node.toml"
    ],
    # a row write into a memory checkpoint's entry, which a parameter made after it is over
    "burn-tensors-are-values-across-a-rebinding": [
        "tests/cases/torch_memory_checkpoint_entry_moves_a_parameter_made_over_it.toml"
    ],
    # a write into the round trip's result, which moves its source's counter under torch.compile
    "torch-compile-traces-numpy-into-a-view-with-the-sources-version-counter": [
        "tests/cases/torch_compile_write_into_a_host_round_trip_moves_its_source_counter.toml"
    ],
    # an optimizer's in-place update of a parameter over an expansion
    "torch-expanded-view-refuses-a-whole-write": [
        "tests/cases/torch_step_into_a_parameter_over_an_expansion_fails.toml"
    ],
}


@pytest.mark.parametrize(("entry_id", "case"), [(e, c) for e, cases in MORE_CASES.items() for c in cases])
def test_more_cases_of_an_entry_are_attributed_to_it(entry_id, case, case_findings):
    findings = case_findings(case)
    assert entry_id in {m.id for f in findings if (m := BASELINE.match(f)) is not None}, [f.signature for f in findings]
