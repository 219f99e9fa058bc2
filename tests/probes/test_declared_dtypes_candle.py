"""Programs declared in bf16 or f16 (a case's top-level ``dtype``) on the candle probe, and their
candle reproducers. Every tensor of such a program is made in its dtype; observations report the
dtype candle gives (``Tensor::dtype``) and the values widened to f32.

Each expectation is candle-core / candle-nn 0.11.1 behaviour, read from the crate sources
(``~/.cargo/registry/src/*/candle-core-0.11.1``, ``candle-nn-0.11.1``) and cited where asserted:

- tensor.rs ``to_dtype``: ``if self.dtype() == dtype { Ok(self.clone()) }``: a conversion to the
  tensor's own dtype is the tensor (one storage, one id); to another dtype, a new storage. So in a
  bf16 program ``to_same_dtype`` and ``via_bf16`` are the param itself (a row write, ``slice_set``,
  and a step, ``Var::set``, reach them), ``via_f32`` a copy; in an f16 program ``via_bf16`` rounds.
- cpu_backend/mod.rs: the element-wise kernels (``Affine``: ``v * mul + add`` with ``mul`` and
  ``add`` made ``T::from_f64``; binary ops) compute in the element type and round each result to
  it (the ``half`` crate: to nearest, ties to even); bfloat16 has 8 significant bits, float16 11.
- candle-nn optim.rs: ``SGD::step`` is ``var.set(&var.sub(&(grad * lr)?)?)``, ``AdamW::step`` the
  same tensor ops, both in the var's dtype (its moments are ``Var::zeros(.., var.dtype(), ..)``).
- candle-nn batch_norm.rs ``forward_train`` normalises an f16/bf16 input in f32
  (``internal_dtype``) and adds the f32 batch statistics to the running ones, which are in the
  VarBuilder's dtype: candle refuses the add ("dtype mismatch in add"); ``forward_eval`` reads
  the running statistics in the input's dtype and works.
- scalar.rs / cpu_backend ``const_set``: a fill needs a ``Scalar`` of the tensor's dtype
  ("const_set dtype mismatch" otherwise); the probe makes it with candle's conversion.
- safetensors keeps a tensor's dtype (``VarMap::save``, ``candle_core::safetensors::load``).
- candle has no query for the dtypes a device has (``Device::supports_bf16`` is false on the CPU,
  whose storage and every kernel above have bf16); the CPU converts to every float dtype, so no
  candle:cpu program is refused for its dtype (``Probe::open`` refuses where a conversion fails).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest

from harness.case.case_file import parse_case, write_case
from harness.case.methods import bf16_rounded
from harness.judging.verdicts import verdicts
from tests.conftest import clean_runs
from tests.support.probe_client import Probe as ProbeClient
from tests.support.reproducers import cargo_reproducer as _cargo_reproducer

TARGET = "candle:cpu"
SGD = {"op": "step", "optimizer": "sgd", "lr": 0.5}


@pytest.fixture(scope="module")
def run():
    with clean_runs(TARGET) as run_program:
        yield run_program


def case(dtype: str, tensors: dict, ops: list[dict], layers: dict | None = None):
    doc = {"format": "aliasfuzz-case/1", "dtype": dtype, "tensors": tensors, "ops": ops}
    if layers:
        doc["layers"] = layers
    return parse_case(doc)


def flat(trace, i, name) -> list[float]:
    """The name's values after op ``i`` (``None``: the initial state)."""
    state = trace.initial if i is None else trace.state_after(i)
    return state[name].value.ravel().tolist()


def snap(method: str, of: str = "w", name: str = "s") -> dict:
    return {"op": "snapshot", "name": name, "of": of, "method": method}


W = [[1.0, 2.0], [3.0, 4.0]]
ROW = {"op": "write", "target": "w", "index": 0, "value": [10.0, 10.0]}


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_every_declared_tensor_is_made_in_the_programs_dtype(run, dtype):
    program = case(
        dtype,
        {
            "w": {"kind": "param", "value": W},
            "b": {"kind": "buffer", "value": [0.5, -2.0]},
            "l": {"kind": "lazy", "shape": [3], "init": "const", "fill": 0.25},
            "u": {"kind": "lazy", "shape": [4], "init": "uniform", "seed": 3},
        },
        [{"op": "read", "target": "w"}],
    )
    t = run(program)
    for name in ("w", "b", "l", "u"):
        assert t.initial[name].dtype == dtype, (name, t.initial[name])
    assert flat(t, None, "w") == [1, 2, 3, 4] and flat(t, None, "b") == [0.5, -2] and flat(t, None, "l") == [0.25] * 3
    assert all(-1 <= x < 1 for x in flat(t, None, "u"))  # Init::Uniform in [-1, 1), drawn in the dtype


def test_an_f32_program_still_reports_f32(run):
    t = run(case("f32", {"w": {"kind": "param", "value": W}}, [snap("via_bf16")]))
    assert t.initial["w"].dtype == "f32" and t.state_after(0)["s"].dtype == "f32"


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_to_same_dtype_is_the_param_itself_and_follows_a_row_write_and_a_step(run, dtype):
    # to_dtype to the tensor's own dtype: self.clone(), the Var's storage.
    program = case(dtype, {"w": {"kind": "param", "value": W}}, [snap("to_same_dtype"), ROW, SGD])
    t = run(program)
    assert [s.status for s in t.steps] == ["ok"] * 3, t.steps
    st0 = t.state_after(0)
    assert st0["s"].dtype == dtype and st0["s"].identity == st0["w"].identity
    assert flat(t, 1, "s") == [10, 10, 3, 4] and flat(t, 2, "s") == [9.5, 9.5, 2.5, 3.5]
    assert verdicts(program, t)["s"].summary == "follows"


def test_via_bf16_in_a_bf16_program_is_two_conversions_to_its_own_dtype_so_the_param_itself(run):
    program = case("bf16", {"w": {"kind": "param", "value": W}}, [snap("via_bf16"), ROW])
    t = run(program)
    assert t.state_after(0)["s"].identity == t.state_after(0)["w"].identity
    assert flat(t, 1, "s") == [10, 10, 3, 4] and t.state_after(1)["s"].dtype == "bf16"
    assert verdicts(program, t)["s"].summary == "follows"


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_via_f32_is_a_copy_back_in_the_programs_dtype(run, dtype):
    program = case(dtype, {"w": {"kind": "param", "value": W}}, [snap("via_f32"), ROW, SGD])
    t = run(program)
    assert [s.status for s in t.steps] == ["ok"] * 3, t.steps
    st0 = t.state_after(0)
    assert st0["s"].dtype == dtype and st0["s"].identity != st0["w"].identity
    assert flat(t, 0, "s") == flat(t, 2, "s") == [1, 2, 3, 4]
    assert verdicts(program, t)["s"].summary == "keeps"


def test_via_f32_in_an_f32_program_is_the_param_itself(run):
    program = case("f32", {"w": {"kind": "param", "value": W}}, [snap("via_f32"), ROW])
    t = run(program)
    assert t.state_after(0)["s"].identity == t.state_after(0)["w"].identity and flat(t, 1, "s") == [10, 10, 3, 4]


def test_via_bf16_in_an_f16_program_rounds_to_bf16_and_comes_back_as_f16(run):
    # 1 + 2^-10 and 1/3 in f16: exact in f16 (11 significant bits), not in bf16 (8).
    values = [1.0009765625, float(np.float16(1 / 3)), 3.0, -0.0078125]
    program = case("f16", {"w": {"kind": "param", "value": values}}, [snap("via_bf16")])
    t = run(program)
    s = t.state_after(0)["s"]
    want = bf16_rounded(np.array(values, np.float32)).tolist()
    assert want[0] == 1.0 and want[1] != values[1]
    assert s.dtype == "f16" and flat(t, 0, "s") == want and flat(t, 0, "w") == values


def test_an_sgd_step_on_a_bf16_param_rounds_each_result_to_bf16(run):
    # grad * lr then var - that, each rounded to bf16: 256 - 0.5 = 255.5 is a tie between 255 and
    # 256 (bf16 spacing 1 there), to even: 256; 3 - 0.25 = 2.75 is exact.
    w, g = [256.0, 3.0, -1.0, 0.5], [1.0, 0.5, 4.0, -1.0]
    program = case("bf16", {"w": {"kind": "param", "value": w, "grad": g}}, [SGD])
    t = run(program)
    assert t.steps[0].status == "ok", t.steps
    exact = np.array(w, np.float32) - np.float32(0.5) * np.array(g, np.float32)
    assert exact.tolist() == [255.5, 2.75, -3.0, 1.0]
    assert flat(t, 0, "w") == bf16_rounded(exact).tolist() == [256.0, 2.75, -3.0, 1.0]
    assert t.state_after(0)["w"].dtype == "bf16"


def test_an_sgd_step_on_an_f16_param_keeps_what_f16_holds(run):
    # f16 spacing between 128 and 256 is 2^-3: 255.5 is exact.
    program = case("f16", {"w": {"kind": "param", "value": [256.0, 3.0], "grad": [1.0, 0.5]}}, [SGD])
    t = run(program)
    assert flat(t, 0, "w") == [255.5, 2.75] and t.state_after(0)["w"].dtype == "f16"


@pytest.mark.parametrize("optimizer", ["adam", "adamw"])
def test_adam_steps_a_bf16_param_in_bf16(run, optimizer):
    # AdamW's first step moves each element by lr * m_hat / (sqrt(v_hat) + eps) = lr * g / |g|,
    # computed in bf16: each element moves by lr within bf16's precision (2^-7 relative, a few
    # roundings).
    w = [1.0, 2.0, -3.0, 4.0]
    g = [1.0, -2.0, 0.5, 1.0]
    program = case(
        "bf16", {"w": {"kind": "param", "value": w, "grad": g}}, [{"op": "step", "optimizer": optimizer, "lr": 0.5}]
    )
    t = run(program)
    assert t.steps[0].status == "ok", t.steps
    got = np.array(flat(t, 0, "w"))
    want = np.array(w) - 0.5 * np.sign(g)
    assert t.state_after(0)["w"].dtype == "bf16"
    assert np.allclose(got, want, rtol=0, atol=4 * 2**-7 * np.abs(want).max()), got
    assert got.tolist() == bf16_rounded(got.astype(np.float32)).tolist()  # values bf16 holds


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_written_filled_and_mapped_values_are_made_in_the_tensors_dtype(run, dtype):
    program = case(
        dtype,
        {"w": {"kind": "param", "value": W}, "b": {"kind": "buffer", "value": W}},
        [
            snap("alias", "b", "r0"),
            {"op": "write", "target": "w", "value": [[5.0, 6.0], [7.0, 8.0]]},  # Var::set
            {"op": "write", "target": "b", "index": 1, "value": [-1.0, -2.0]},  # slice_set of a row
            {"op": "fill", "target": "b", "value": 1.5},  # const_set
            {"op": "scale", "target": "w", "factor": 0.5},  # affine, Var::set
            {"op": "map", "target": "b", "fn": "add_scalar"},  # affine: a new tensor
            {"op": "map", "target": "b", "fn": "clamp"},  # maximum / minimum of scalars
        ],
    )
    t = run(program)
    assert [s.status for s in t.steps] == ["ok"] * 7, t.steps
    assert flat(t, 1, "w") == [5, 6, 7, 8] and flat(t, 2, "r0") == [1, 2, -1, -2]
    assert flat(t, 3, "r0") == [1.5] * 4 and flat(t, 4, "w") == [2.5, 3, 3.5, 4]
    assert flat(t, 5, "b") == [2.5] * 4 and flat(t, 5, "r0") == [1.5] * 4 and flat(t, 6, "b") == [1] * 4
    for name in ("w", "b", "r0"):
        assert t.state_after(6)[name].dtype == dtype, name


def test_a_bf16_map_rounds_its_result(run):
    # t + 1.0 is Affine(1, 1) in bf16: 256 + 1 = 257 is a tie between 256 and 258, to even: 256.
    t = run(
        case(
            "bf16", {"b": {"kind": "buffer", "value": [256.0, 2.0]}}, [{"op": "map", "target": "b", "fn": "add_scalar"}]
        )
    )
    assert flat(t, 0, "b") == [256.0, 3.0]


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_the_training_loop_ops_run_in_the_programs_dtype(run, dtype):
    # backward then step: the two passes' gradients summed (support::add_grads) and one SGD step;
    # appends grow a buffer in its dtype (Tensor::cat, candle-nn's kv_cache::Cache).
    program = case(
        dtype,
        {"w": {"kind": "param", "value": W}, "b": {"kind": "buffer", "value": W}},
        [
            {"op": "backward"},
            SGD,
            {"op": "append", "target": "b", "source": "w", "how": "cache"},
            {"op": "append", "target": "b", "source": "w", "how": "cat"},
            {"op": "save", "name": "c", "to": "file"},
            {"op": "load", "from": "c"},
            {"op": "assign", "target": "b", "source": "w", "index": 0, "source_index": 1},
        ],
    )
    t = run(program)
    assert [s.status for s in t.steps] == ["ok"] * 7, t.steps
    assert flat(t, 1, "w") == [0, 1, 2, 3]  # w - 0.5 * (1 + 1)
    assert flat(t, 3, "b") == [1, 2, 3, 4, 0, 1, 2, 3, 0, 1, 2, 3] and flat(t, 5, "w") == [0, 1, 2, 3]
    assert flat(t, 6, "b")[:2] == [2, 3]
    for name in ("w", "b", "c.w"):
        assert t.state_after(6)[name].dtype == dtype, name


def test_to_host_and_checkpoints_keep_the_dtype(run):
    program = case(
        "bf16",
        {"w": {"kind": "param", "value": W}},
        [
            snap("to_host", name="h"),
            snap("save_load", name="sl"),
            {"op": "save", "name": "c", "to": "file"},
            {"op": "save", "name": "m", "to": "memory"},
            ROW,
        ],
    )
    t = run(program)
    assert [s.status for s in t.steps] == ["ok"] * 5, t.steps
    st = t.state_after(4)
    for name in ("h", "sl", "c.w", "m.w"):
        assert st[name].dtype == "bf16", name
    assert flat(t, 4, "h") == flat(t, 4, "sl") == flat(t, 4, "c.w") == [1, 2, 3, 4]
    assert flat(t, 4, "m.w") == [10, 10, 3, 4]  # the memory checkpoint holds the Var itself


def test_batch_norm_in_bf16_refuses_to_train_and_evaluates(run):
    program = case(
        "bf16",
        {"x": {"kind": "buffer", "value": [[1.0, 2.0], [3.0, 6.0]]}},
        [
            {"op": "forward", "name": "y", "layer": "bn", "input": "x"},
            {"op": "valid"},
            {"op": "forward", "name": "y_eval", "layer": "bn", "input": "x"},
        ],
        layers={"bn": {"kind": "batch_norm", "features": 2, "momentum": 0.5}},
    )
    t = run(program)
    assert t.initial["bn.running_mean"].dtype == t.initial["bn.running_var"].dtype == "bf16"
    assert [s.status for s in t.steps] == ["error", "ok", "ok"], t.steps
    assert "dtype mismatch" in t.steps[0].message and "BF16" in t.steps[0].message and "F32" in t.steps[0].message
    # eval: (x - mean) / sqrt(var + eps), each op in bf16: 1 + 1e-5 rounds to 1 (bf16 spacing at
    # 1 is 2^-7), so y_eval is x itself, in bf16.
    assert t.state_after(2)["y_eval"].dtype == "bf16" and flat(t, 2, "y_eval") == [1, 2, 3, 6]
    assert flat(t, 2, "bn.running_mean") == [0, 0]  # the refused forward set nothing


def test_the_handshake_lists_via_f32():
    p = ProbeClient("candle_probe", "cpu")
    try:
        assert "via_f32" in p.hello()["methods"]
    finally:
        p.close()


# -------------------------------------------------------------------------------------------------
# The reproducer: the generated cargo project prints what the probe observed.


REPRO_OPS = [
    snap("to_same_dtype"),
    snap("via_f32", name="f"),
    snap("via_bf16", name="v"),
    snap("to_host", name="h"),
    ROW,
    {"op": "write", "target": "b", "value": [[5.0, 6.0], [7.0, 8.0]]},
    {"op": "fill", "target": "b", "value": 1.5},
    {"op": "map", "target": "b", "fn": "add_scalar"},
    SGD,
    {"op": "step", "optimizer": "adamw", "lr": 0.25},
    {"op": "save", "name": "c", "to": "file"},
]


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_the_reproducer_makes_the_programs_dtype_and_prints_what_the_probe_observed(dtype, tmp_path):
    # The generated project runs the probe's calls in the program's dtype (`let dt = DType::BF16`)
    # and prints, after every op, the values the probe observed.

    program = case(
        dtype,
        {
            "w": {"kind": "param", "value": W, "grad": [[1.0, -1.0], [0.5, 2.0]]},
            "b": {"kind": "buffer", "value": W},
            "l": {"kind": "lazy", "shape": [2], "init": "const", "fill": 0.75},
        },
        REPRO_OPS,
        layers={"bn": {"kind": "batch_norm", "features": 2, "momentum": 0.5}},
    )
    path = write_case(program, tmp_path / f"{dtype}_program.toml")
    checkpoint_files = set(Path(tempfile.gettempdir()).glob("aliasfuzz-repro-*.safetensors"))
    out, doc = _cargo_reproducer("candle", path, TARGET, tmp_path)
    # The file checkpoint is read back, then removed: a replayed case leaves nothing behind.
    assert set(Path(tempfile.gettempdir()).glob("aliasfuzz-repro-*.safetensors")) <= checkpoint_files
    assert [s["status"] for s in doc["targets"][TARGET]["ops"]] == ["ok"] * len(REPRO_OPS)
    main_rs = (tmp_path / "repro-candle" / "src" / "main.rs").read_text()
    assert f"let dt = DType::{dtype.upper()};" in main_rs and 'varmap.get((2,), "l", ' in main_rs
