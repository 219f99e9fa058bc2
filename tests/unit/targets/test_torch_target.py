"""Tests of the PyTorch target (``python -m harness.targets.torch``: the Python driver
``harness/targets/driver.py`` serving the torch session ``harness/targets/torch/session.py``), run
as a real subprocess.

Every reply is validated against ``rust_probes/protocol/schema/protocol.schema.json`` (and every
request the tests send, so the tests speak the protocol the harness speaks). Expected behaviour is
derived from PyTorch's documentation or source, cited at each expectation, never from the target.

The tests here run in this process, as the
unit tier requires; those that need the real frameworks are in tests/probes/test_torch_target.py.
"""

from __future__ import annotations

from tests.support.torch_target import FOLLOWS, KEEPS, SCHEMA

# ---------------------------------------------------------------------------------------------
# Snapshot methods across an in-place update of the param.
#
# "follows" = the snapshot shares memory with the param, so the in-place SGD update
# (torch/optim/sgd.py `_single_tensor_sgd`: `param.add_(grad, alpha=-lr)`) and the in-place row
# write are visible through it; "keeps" = it owns its memory.


def test_follow_and_keep_tables_cover_every_method():
    # The shape-derived views (expand, select, ...) take other shapes than 2x2: tests/probes/test_views.py.
    from tests.support.torch_docs import TORCH_DOCS

    assert set(FOLLOWS) | set(KEEPS) | set(TORCH_DOCS) == set(SCHEMA["$defs"]["method"]["enum"])
    assert not set(FOLLOWS) & set(KEEPS) and not (set(FOLLOWS) | set(KEEPS)) & set(TORCH_DOCS)
