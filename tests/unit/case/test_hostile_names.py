"""Names are only names (issue 40, fault 15): a case may call its tensors, layers, snapshots,
clones and checkpoints by any identifier the case format accepts (``values.is_identifier``),
``nn.Module``'s own attribute names included, and every target observes the same thing and the
oracle reports the same signatures as under ordinary names.

Each case of tests/cases is run as written and with every name it binds replaced by a hostile one
(``HOSTILE``, rotated so that each is a param, a buffer, a layer, a snapshot and a prefix across
the cases). Before the fix the torch target registered each tensor on its ``nn.Module`` under the
case's name: ``register_parameter("training", ...)`` raises "attribute 'training' already exists",
and the program's error trace became an ``error|torch:cpu`` finding of its own.

The tests here run in this process, as the
unit tier requires; those that need the real frameworks are in tests/probes/test_hostile_names.py.
"""

from __future__ import annotations

import pytest
from torch import nn

from harness.case.values import is_identifier
from harness.targets.torch.names import KEY_PREFIX, case_name, model_key
from tests.support.hostile_names import (
    HOSTILE,
    hostile_cases,
)

# ---------------------------------------------------------------------------------------------


def test_the_case_format_accepts_every_hostile_name():
    assert all(is_identifier(n) for n in HOSTILE)


def test_no_module_attribute_starts_with_the_key_prefix_and_keys_map_back():
    # What makes the prefix safe on this torch: the model, a layer, and the class itself.
    for owner in (nn.Module(), nn.BatchNorm1d(2), nn.Dropout(0.0), nn.Module):
        assert not [a for a in dir(owner) if a.startswith(KEY_PREFIX)], owner
    for name in (*HOSTILE, "bn.running_mean", "case_bn.running_var"):
        assert case_name(model_key(name)) == name
    assert model_key("case_training") != model_key("training")
    # A name Python may look up as a hook on the instance is never the model's own attribute.
    assert model_key("__deepcopy__") == KEY_PREFIX + "__deepcopy__" and model_key("w") == "w"
    with pytest.raises(ValueError):
        case_name("training")


def test_renaming_is_a_bijection_of_each_cases_names():
    for name, program, renamed, old_of in hostile_cases():
        assert len(set(old_of)) == len(old_of) == len(set(old_of.values())), name
        assert len(renamed.ops) == len(program.ops)
