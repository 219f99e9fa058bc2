"""The snapshot methods whose arguments come from the source's shape (issue #16): `expand`,
`permute`, `flip`, `narrow`, `unsqueeze`, `squeeze`, `chunk`, `select`, on the real targets.

Each expectation is a framework's documented behaviour, cited where it is asserted:

- torch: every one but `flip` is a view ("Tensor Views" docs), so it follows a write of its source
  and a step (SGD's `param.add_`), and a write into it reaches the source; `expand` has stride 0
  and torch refuses a write that would store two values in one place; `flip` copies.
- candle (candle-core 0.11.1 sources): every one but `flip` builds a new `Tensor_` with
  `storage: self.storage.clone()` (tensor.rs `broadcast_as`, `permute`, `squeeze`, `unsqueeze`,
  `narrow`; `chunk` and `IndexOp::i` call `narrow`), one storage with the param's Var, which a row
  write (`slice_set`) and a step (`Var::set`, variable.rs: `copy_strided_src` into the existing
  storage) write in place; `flip` is `index_select` (tensor.rs `flip`), a new storage.
- burn: tensors are values; no snapshot sees a later write of its source, nor the source one into
  the snapshot (burn-tensor ops take `self`; a write rebinds the name).

Also: the case format refuses each method on a shape it does not apply to, the generator draws
each one, and the minimizer keeps cases valid while it shrinks their shapes.

The tests here run in this process (the command line through ``run_cli_in_process``), as the
unit tier requires; those that need the real frameworks are in tests/probes/test_views.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings

from generators.programs import programs
from harness.case import ops
from harness.case.ir import CaseError, Program, TensorDecl, check_program
from harness.shrinking.minimize import minimize
from harness.targets.torch.views import VIEWS
from tests.conftest import run_cli_in_process
from tests.support.torch_docs import TORCH_DOCS

VIEW_METHODS = ("expand", "permute", "flip", "narrow", "unsqueeze", "squeeze", "chunk", "select")


def test_the_table_declares_the_views_and_every_torch_call_is_documented():
    assert set(VIEW_METHODS) <= set(ops.METHODS) and set(TORCH_DOCS) == set(VIEW_METHODS) == set(VIEWS)


def _view(method: str, t: torch.Tensor) -> torch.Tensor:
    """The torch target's call of a view ``method`` on ``t``, run from its source as the session runs it."""
    return eval(VIEWS[method]("t", t), {"t": t})


# ---------------------------------------------------------------------------------------------
# The case format, the generator and the minimizer.

#: Per method: a source shape it does not apply to, and what the error says it needs.
REFUSED = {
    "expand": ((2, 1, 2), "rank 2 or less"),
    "permute": ((2, 2), "rank 3"),
    "narrow": ((1, 3), "2 rows or more"),
    "unsqueeze": ((1, 1, 2), "rank 2 or less"),
    "squeeze": ((2, 2), "one row"),
    "chunk": ((1,), "2 rows or more"),
    "select": ((3,), "rank 2 or more"),
}


@pytest.mark.parametrize("method", sorted(REFUSED))
def test_a_method_on_a_shape_it_does_not_apply_to_is_refused_naming_the_field(method):
    shape, needs = REFUSED[method]
    w = TensorDecl("w", "buffer", shape, (1.0,) * math.prod(shape))
    with pytest.raises(CaseError) as e:
        check_program((w,), [{"op": "snapshot", "name": "s", "of": "w", "method": method}])
    msg = str(e.value)
    assert "\n" not in msg and "ops[0].method" in msg and method in msg and needs in msg, msg
    assert not ops.METHODS_BY_NAME[method].accepts(shape)


def test_a_squeeze_of_a_case_file_is_one_line_on_the_command_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(
        'format = "aliasfuzz-case/1"\n[tensors]\nw = { kind = "param", value = [[1.0, 2.0], [3.0, 4.0]] }\n'
        '[[ops]]\nop = "snapshot"\nname = "s"\nof = "w"\nmethod = "squeeze"\n'
    )
    r = run_cli_in_process("repro", str(bad), "--targets", "torch:cpu")
    assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout)
    assert r.stderr.strip() == (
        f"aliasfuzz: {bad}: ops[0].method: squeeze needs a tensor of rank 2 or more with one "
        "row, not one of shape [2, 2]"
    )


def test_the_table_shapes_are_what_numpy_views_give():
    a = np.arange(12, dtype=np.float32)
    for shape in [(3,), (2, 3), (1, 3), (3, 2, 2), (1, 2, 2), (3, 1)]:
        x = a[: math.prod(shape)].reshape(shape)
        for m in VIEW_METHODS:
            spec = ops.METHODS_BY_NAME[m]
            if spec.accepts(shape):
                assert ops.apply_view(m, x).shape == ops.snapshot_shape(m, shape), (m, shape)
                # .copy(): fresh C-order strides (numpy keeps a flipped one-row array's negative
                # stride as "contiguous", which torch.from_numpy refuses)
                assert torch.equal(_view(m, torch.from_numpy(x)), torch.from_numpy(ops.apply_view(m, x).copy())), (
                    m,
                    shape,
                )


@pytest.mark.parametrize("profile", ["quick", "default"])
def test_the_generator_draws_every_view_on_a_source_it_accepts(profile):
    seen: dict[str, int] = {}

    # Derandomized: the same programs every run, so the test cannot pass or fail by chance; 800 of
    # them, since `squeeze` (one row, rank 2 or more) and `select` apply to few sources and are
    # drawn about once in 40 programs.
    @settings(max_examples=800, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(programs(profile))
    def draw(program):
        for _, op, shapes in ops.walk(program.tensors, program.ops, program.layers):
            if op["op"] == "snapshot" and op["method"] in VIEW_METHODS:
                assert ops.METHODS_BY_NAME[op["method"]].accepts(shapes[op["of"]]), (op, shapes[op["of"]])
                seen[op["method"]] = seen.get(op["method"], 0) + 1

    draw()
    assert set(seen) == set(VIEW_METHODS), seen


#: Per method: a larger source than it needs, and the smallest one the minimizer can shrink it to.
SHRINKS = {
    "expand": ((3, 2), (1,)),
    "permute": ((2, 3, 2), (1, 1, 1)),
    "flip": ((3, 2), (1,)),
    "narrow": ((3, 2), (2,)),
    "unsqueeze": ((3, 2), (1,)),
    "squeeze": ((1, 3, 2), (1, 1)),
    "chunk": ((3, 3), (2,)),
    "select": ((2, 3, 2), (1, 1)),
}


@pytest.mark.parametrize("method", VIEW_METHODS)
def test_the_minimizer_shrinks_a_view_only_to_shapes_it_accepts(method):
    big, smallest = SHRINKS[method]
    w = TensorDecl("w", "param", big, tuple(float(i + 2) for i in range(math.prod(big))))
    out_shape = ops.snapshot_shape(method, big)
    program = Program(
        (w,),
        check_program(
            (w,),
            [
                {"op": "snapshot", "name": "s", "of": "w", "method": method},
                {"op": "write", "target": "s", "index": 0, "value": [3.0] * math.prod(out_shape[1:])},
                {"op": "step", "optimizer": "sgd", "lr": 0.5},
            ],
        ),
    )
    candidates = []

    def shows(batch):  # TEST DOUBLE of a signature: the view and a write into it are still there
        out = []
        for p in batch:
            candidates.append(p)
            check_program(p.tensors, list(p.ops))  # every candidate is a valid case
            kinds = [(op["op"], op.get("method")) for op in p.ops]
            out.append(("snapshot", method) in kinds and ("write", None) in kinds)
        return out

    result = minimize(program, shows, time_limit_s=60)
    assert result.complete and candidates
    for p in candidates:
        for _, op, shapes in ops.walk(p.tensors, p.ops):
            if op["op"] == "snapshot":
                assert ops.METHODS_BY_NAME[op["method"]].accepts(shapes[op["of"]]), (op, shapes[op["of"]])
    final = result.program
    assert [op["op"] for op in final.ops] == ["snapshot", "write"]
    assert final.tensors[0].shape == smallest, final.tensors[0].shape
