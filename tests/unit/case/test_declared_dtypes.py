"""A case's dtype (``dtype = "bf16"`` or ``"f16"``): the case format, the generator, the minimizer,
and the torch target. The candle and burn probes have their own files
(``test_declared_dtypes_candle.py``, ``test_declared_dtypes_burn.py``).

What torch does is its documentation's: ``Tensor.to`` "If the self Tensor already has the correct
torch.dtype and torch.device, then self is returned", so in a bf16 case ``to_same_dtype`` and
``via_bf16`` (two conversions to bf16) are the parameter itself, and ``via_f32`` (through a float32
copy) is a new tensor; torch's SGD updates a bf16 parameter in bf16 (``p.add_(g, alpha=-lr)``).

The tests here run in this process, as the
unit tier requires; those that need the real frameworks are in tests/probes/test_declared_dtypes.py.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings

from generators.programs import programs
from harness.case.case_file import dump_case, parse_case
from harness.case.ir import CaseError, Program, TensorDecl, check_program
from harness.shrinking.minimize import simplifications

W = TensorDecl("w", "param", (2, 2), (1.0, 2.0, 3.0, 4.0))


def _case(dtype: str, value: list, ops: list | None = None) -> dict:
    return {
        "format": "aliasfuzz-case/1",
        "dtype": dtype,
        "tensors": {"w": {"kind": "param", "value": value}},
        "ops": ops or [],
    }


def _program(dtype: str, *ops: dict) -> Program:
    return Program((W,), check_program((W,), list(ops), dtype=dtype), dtype=dtype)


# ---- the case format ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["f32", "bf16", "f16"])
def test_a_dtype_round_trips_through_a_case_file(dtype):
    program = parse_case(_case(dtype, [1.5, -2.0]))
    assert program.dtype == dtype
    import tomllib

    assert parse_case(tomllib.loads(dump_case(program))) == program
    # the wire form of a float32 program is unchanged; another dtype travels with the program
    assert program.to_wire().get("dtype") == (None if dtype == "f32" else dtype)


@pytest.mark.parametrize(
    "dtype, value, index, rounds_to",
    [
        ("bf16", [1.0, 1.00390625], 1, "1.0"),  # a tie, to even
        ("bf16", [0.1], 0, "0.10009765625"),
        ("f16", [1.0, 2.0, 0.1], 2, "0.0999755859375"),
        ("f16", [70000.0], 0, "inf"),  # beyond f16's range
    ],
)
def test_a_value_the_dtype_does_not_hold_is_refused_with_its_place(dtype, value, index, rounds_to):
    with pytest.raises(CaseError) as e:
        parse_case(_case(dtype, value), "c.toml")
    msg = str(e.value)
    assert msg.startswith(f"c.toml: tensors.w.value[{index}]: ") and f"not exact in {dtype}" in msg
    assert rounds_to in msg and "\n" not in msg


def test_a_written_value_is_checked_too_and_float32_takes_it():
    ops = [{"op": "write", "target": "w", "index": 0, "value": 0.1}]
    with pytest.raises(CaseError, match=r"ops\[0\]\.value\[0\]: 0\.1.* not exact in bf16"):
        parse_case(_case("bf16", [1.0, 2.0], ops))
    assert parse_case(_case("f32", [1.0, 2.0], ops)).dtype == "f32"


def test_an_unknown_dtype_is_refused():
    with pytest.raises(CaseError, match="dtype: must be one of f32, bf16, f16, got 'f64'"):
        parse_case(_case("f64", [1.0]))
    with pytest.raises(CaseError, match="dtype: must be one of"):
        check_program((W,), [], dtype="float16")


# ---- the generator and the minimizer ------------------------------------------------------------


def test_the_generator_draws_every_dtype_and_mostly_float32():
    seen: Counter = Counter()

    @settings(max_examples=300, database=None, suppress_health_check=list(HealthCheck), deadline=None)
    @given(programs("quick"))
    def draw(program):
        seen[program.dtype] += 1
        # what the generator draws passes the case checks in its dtype
        check_program(program.tensors, list(program.ops), layers=program.layers, dtype=program.dtype)

    draw()
    assert set(seen) == {"f32", "bf16", "f16"}
    assert seen["f32"] > seen["bf16"] + seen["f16"]


def test_the_minimizer_tries_float32_first():
    program = _program("bf16", {"op": "snapshot", "name": "s", "of": "w", "method": "to_same_dtype"})
    first = next(simplifications(program))
    assert first.dtype == "f32" and first.ops == program.ops
    assert all(p.dtype == "f32" for p in simplifications(replace(program, dtype="f32")))
