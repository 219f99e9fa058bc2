"""The semantics matrix: built from the op table, run on the real targets, rendered, and the copy
in docs/ current.

The tests here run in this process, as the
unit tier requires; those that need the real frameworks are in tests/probes/test_matrix.py.
"""

from __future__ import annotations

from harness.case import ops
from harness.reporting.matrix import OP_CLASSES, row_case, rows


def test_every_method_has_a_row_per_op_class():
    made = {(r.method, r.op_class) for r in rows()}
    for m in ops.METHOD_TABLE:
        for op_class in OP_CLASSES:
            assert (m.name, op_class) in made or row_case(m.name, op_class) is None
