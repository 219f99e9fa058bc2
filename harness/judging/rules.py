"""The oracle's attribution rules: each way a difference between two traces becomes a finding, by
name.

A finding records the rule that made it (``Finding.rule``, in its JSON, the run's journal and the
reports), so that a surprising attribution can be traced to the code and the reasoning behind it.
``RULES`` is the one list: the oracle (``oracle``, ``sharing``, ``metamorphic``,
``harness_errors``) names a rule from it whenever it makes a finding, and ``docs/ORACLE.md``'s rule
table is ``markdown()`` (``python -m harness.judging.rules`` prints it; a test keeps the two equal).

A rule's ``shown_by`` is a case in ``tests/cases/`` whose run on the CPU targets makes a finding by
that rule (``tests/probes/test_oracle_rules.py`` runs each one), or, for the rules no framework shows
today, the test that plants the difference in a test double.

Invariants: rule names are unique, kebab-case and never reused for another meaning (a finding
journal names them); every finding the oracle makes names one of them.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    """One attribution rule."""

    name: str
    #: The aspect of the findings it makes (``Finding.aspect``).
    aspect: str
    #: Why a difference of this shape is this finding, in one line.
    reason: str
    #: A case under ``tests/cases/`` that shows it, or a test (``tests/...py::test_...``).
    shown_by: str


OP_FAILS_ON_ONE_SIDE = Rule(
    "op-fails-on-one-side",
    "status",
    "The first op that raises an error on one target and succeeds on the other; later failures"
    " follow from it (a failed burn call may have consumed its input).",
    "tests/cases/candle_flip_of_a_strided_tensor_fails.toml",
)
PROGRAM_FAILS = Rule(
    "program-fails",
    "status",
    "A target that crashed, timed out or failed the whole program while another ran it: one"
    " finding per target, whatever the others did.",
    "tests/unit/judging/test_oracle_rules.py::test_a_target_that_crashed_on_the_program_is_a_program_fails_finding",
)
SNAPSHOT_RELATION_DIFFERS = Rule(
    "snapshot-relation-differs",
    "verdict",
    "A snapshot follows its source on one target and keeps its value on the other: its snapshot"
    " method means different things, at the first op where the verdicts differ.",
    "tests/cases/candle_clone_shares_storage.toml",
)
SOURCE_MOVES_ON_ONE_SIDE = Rule(
    "source-moves-on-one-side",
    "verdict",
    "An op moved a snapshot's source on one target only, and no aliasing differed before: the"
    " snapshot's relation is the finding, and of the snapshots on a write's path only the one"
    " nearest the written name (the link that carried the write there).",
    "tests/cases/candle_param_replaced_from_a_clone_is_the_old_var.toml",
)
OP_EFFECT_DIFFERS = Rule(
    "op-effect-differs",
    "value",
    "An op changed the tensor it acts on on one target only (a step that does not train a"
    " parameter there): its effect is the finding, not the verdicts of the snapshots it moved.",
    "tests/cases/candle_trains_a_param_torch_froze.toml",
)
ENDED_LINK_STILL_SHARES = Rule(
    "ended-link-still-shares",
    "value",
    "A tensor moved with an op on one target through a relation the program had ended (a name"
    " bound again): that relation still shares storage there, and names the finding.",
    "tests/cases/candle_detach_of_a_clone_writes_into_the_source.toml",
)
COMMON_SOURCE_CARRIES_THE_WRITE = Rule(
    "common-source-carries-the-write",
    "value",
    "A tensor moved on one target with a sibling the op wrote, both made from an object since"
    " bound again: the link to that common source carried the write.",
    "tests/unit/judging/test_oracle_links.py::test_a_snapshot_of_a_sibling_that_saw_it_move_on_one_side_is_the_siblings_finding",
)
VALUE_DIFFERS = Rule(
    "value-differs",
    "value",
    "The first value that differs beyond the program's tolerance and that no earlier finding of"
    " the pair set apart (optimizer arithmetic, a layer's statistics).",
    "tests/cases/torch_foreach_adamw_with_aliased_parameters.toml",
)
MOVED_BY_AN_EARLIER_DIVERGENCE = Rule(
    "moved-by-an-earlier-divergence",
    "value",
    "A value that differs because an earlier finding set its name apart is that finding's"
    " consequence: said in the cause's detail, never a finding of its own.",
    "tests/unit/judging/test_oracle.py::test_a_snapshot_taken_of_a_name_after_it_diverged_is_that_divergences_consequence",
)
IDENTITY_DIFFERS = Rule(
    "identity-differs",
    "identity",
    "Two names are one object on one target and two on the other, from the first op after which"
    " the partitions by identity differ.",
    "tests/cases/candle_varmap_entry_is_the_var.toml",
)
DTYPE_DIFFERS = Rule(
    "dtype-differs",
    "dtype",
    "A name held in another dtype on each target, at the op that made it so: one framework changed"
    " or made a tensor in another dtype than the case's.",
    "tests/unit/judging/test_oracle.py::test_a_tensor_one_framework_holds_in_another_dtype_is_a_dtype_finding",
)
VERSION_DIFFERS = Rule(
    "version-differs",
    "version",
    "An op bumped a name's version counter on one target and left it on the other, where both"
    " have counters and the name's value moved alike on both: autograd's check of saved tensors"
    " sees the write on one side only (a backward over it is refused there alone).",
    "tests/unit/judging/test_oracle_rules.py::test_a_write_one_target_keeps_off_the_version_counter_is_a_version_finding",
)
WRITE_HIDDEN_FROM_AUTOGRAD = Rule(
    "write-hidden-from-autograd",
    "version",
    "An in-place write changed a name's values on a target with version counters and left the"
    " name's counter where it was (the target against itself): autograd's check of saved tensors"
    " cannot see it, so a backward pass over a graph that saved the name runs with the new values.",
    "tests/cases/torch_data_write_is_hidden_from_autograd.toml",
)
SHARING_CHANGES = Rule(
    "sharing-changes",
    "identity, storage",
    "A module clone, a checkpoint or a load splits two of the model's names that were one object"
    " or one storage on a target, or joins two that were not (the target against itself).",
    "tests/cases/torch_deepcopy_splits_parameters_over_one_storage.toml",
)
INERT_OPS_CHANGE_THE_RUN = Rule(
    "inert-ops-change-the-run",
    "status, value, identity",
    "A target's run of a program with a group of inert ops (reads, snapshots never used) differs"
    " from its run without them: the first op whose status, value or identities differ.",
    "tests/cases/burn_tied_param_valid_train_halves_a_step.toml",
)
INERT_OPS_REORDER_THE_DRAW = Rule(
    "inert-ops-reorder-the-draw",
    "draw",
    "The inert group changed the order in which lazy params drew from the program's one"
    " generator: the reordering is the finding, not each value it changed.",
    "tests/cases/burn_valid_initialises_every_lazy_param.toml",
)
HARNESS_ERROR = Rule(
    "harness-error",
    "harness",
    "aliasfuzz itself raised while judging, shrinking or recording a program: a bug of the"
    " harness, kept as a finding so that it is shrunk and reported like any other.",
    "tests/e2e/test_harness_errors.py::test_an_oracle_exception_is_a_harness_error_finding_with_its_traceback",
)

#: Every rule, in the order the oracle applies them to a pair (then the per-target rules).
RULES: tuple[Rule, ...] = (
    PROGRAM_FAILS,
    OP_FAILS_ON_ONE_SIDE,
    SNAPSHOT_RELATION_DIFFERS,
    SOURCE_MOVES_ON_ONE_SIDE,
    OP_EFFECT_DIFFERS,
    ENDED_LINK_STILL_SHARES,
    COMMON_SOURCE_CARRIES_THE_WRITE,
    IDENTITY_DIFFERS,
    VALUE_DIFFERS,
    MOVED_BY_AN_EARLIER_DIVERGENCE,
    DTYPE_DIFFERS,
    VERSION_DIFFERS,
    SHARING_CHANGES,
    WRITE_HIDDEN_FROM_AUTOGRAD,
    INERT_OPS_CHANGE_THE_RUN,
    INERT_OPS_REORDER_THE_DRAW,
    HARNESS_ERROR,
)
BY_NAME = {r.name: r for r in RULES}
assert len(BY_NAME) == len(RULES) and all(re.fullmatch(r"[a-z]+(-[a-z]+)*", r.name) for r in RULES)


def markdown() -> str:
    """The rule table of ``docs/ORACLE.md``."""
    lines = ["| rule | aspect | why | shown by |", "|---|---|---|---|"]
    for r in RULES:
        lines.append(f"| `{r.name}` | {r.aspect} | {r.reason} | `{r.shown_by}` |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown())
