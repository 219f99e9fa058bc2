"""A case's dtype (``dtype = "bf16"`` or ``"f16"``): the case format, the generator, the minimizer,
and the torch target. The candle and burn probes have their own files
(``test_declared_dtypes_candle.py``, ``test_declared_dtypes_burn.py``).

What torch does is its documentation's: ``Tensor.to`` "If the self Tensor already has the correct
torch.dtype and torch.device, then self is returned", so in a bf16 case ``to_same_dtype`` and
``via_bf16`` (two conversions to bf16) are the parameter itself, and ``via_f32`` (through a float32
copy) is a new tensor; torch's SGD updates a bf16 parameter in bf16 (``p.add_(g, alpha=-lr)``).

The tests of this subject that run in-process are in tests/unit/case/test_declared_dtypes.py.
"""

from __future__ import annotations

import pytest

from harness.case.ir import Program, TensorDecl, check_program
from harness.judging.verdicts import verdicts
from tests.conftest import run_cli

W = TensorDecl("w", "param", (2, 2), (1.0, 2.0, 3.0, 4.0))


def _program(dtype: str, *ops: dict) -> Program:
    return Program((W,), check_program((W,), list(ops), dtype=dtype), dtype=dtype)


# ---- the torch target ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def torch_bf16(runner):
    """A bf16 parameter, three conversions to its own dtype, a row write and an SGD step."""
    program = _program(
        "bf16",
        {"op": "snapshot", "name": "same", "of": "w", "method": "to_same_dtype"},
        {"op": "snapshot", "name": "rt", "of": "w", "method": "via_bf16"},
        {"op": "snapshot", "name": "wide", "of": "w", "method": "via_f32"},
        {"op": "write", "target": "w", "index": 1, "value": [10.0, 10.0]},
        {"op": "step", "optimizer": "sgd", "lr": 0.5},
    )
    traces = runner.run_one(program, every_target=True)
    return program, traces["torch:cpu"]


def test_torch_makes_and_keeps_every_tensor_in_the_cases_dtype(torch_bf16):
    _, trace = torch_bf16
    assert trace.status == "ok"
    assert trace.initial["w"].dtype == "bf16"
    final = trace.state_after(4)
    assert {n: o.dtype for n, o in final.items()} == {"w": "bf16", "same": "bf16", "rt": "bf16", "wide": "bf16"}
    # SGD in bf16: every element moves by -0.5, exactly (all of them bf16 values)
    assert final["w"].value.ravel().tolist() == [0.5, 1.5, 9.5, 9.5]


def test_torch_conversions_to_the_own_dtype_are_the_tensor_itself(torch_bf16):
    program, trace = torch_bf16
    after = trace.state_after(2)
    assert after["same"].identity == after["rt"].identity == after["w"].identity
    assert after["wide"].identity != after["w"].identity
    got = {name: v.summary for name, v in verdicts(program, trace).items()}
    assert got == {"same": "follows", "rt": "follows", "wide": "keeps"}


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_torch_adam_runs_in_the_cases_dtype(runner, dtype):
    program = _program(dtype, {"op": "step", "optimizer": "adam", "lr": 0.25})
    trace = runner.run_one(program, every_target=True)["torch:cpu"]
    w = trace.state_after(0)["w"]
    assert trace.steps[0].status == "ok" and w.dtype == dtype
    # Adam's first step moves every element by about lr: 1 - 0.25, 2 - 0.25, ... rounded in the dtype
    assert w.value.ravel().tolist() == pytest.approx([0.75, 1.75, 2.75, 3.75], rel=2**-7)


def test_the_torch_reproducer_makes_the_cases_dtype(tmp_path):
    from harness.targets.reproducers import torch_script

    script = torch_script(_program("f16", {"op": "snapshot", "name": "s", "of": "w", "method": "via_f32"}))
    assert "dtype=torch.float16))" in script and "model.w = w = nn.Parameter(torch.tensor(" in script
    assert "s = w.to(torch.float32).to(torch.float16)" in script


def test_repro_of_the_bundled_bf16_case_on_torch_names_no_divergence_of_its_own():
    # torch against its own foreach variant: one target alone would be no comparison (exit 2).
    r = run_cli(
        "repro", "--targets", "torch:cpu,torch:cpu+foreach", "tests/cases/bf16_conversions_to_its_own_dtype.toml"
    )
    assert r.returncode == 0, r.stderr
