"""Programs declared in bfloat16 or float16 on the burn probe (issue #16, item 2): every tensor,
lazy param, layer state and written value in the program's dtype, on burn 0.22.1's CPU backends.

Each expectation is burn's documented behaviour or source (``~/.cargo/registry/src/*/``), cited
where it is asserted:

- burn-tensor 0.22.1 options.rs: a tensor is created in ``TensorCreationOptions``' dtype when one
  is given (``from_data(data, (&device, dtype))``, ``zeros``, ``full``, ``random``), else in the
  device's default (f32); ``Tensor::dtype`` reports it. ``Param::from_data`` and burn-nn's
  ``Initializer::Constant`` take no dtype (the probe makes those in the dtype by the same calls
  with ``(&device, dtype)``: session/make.rs).
- burn-tensor cast.rs: ``cast`` to the tensor's own float dtype returns the tensor; a burn tensor
  is a value, so a snapshot keeps whatever is written to its source later.
- burn-flex backend.rs ``dtype_usage``: F16 and BF16 have storage and arithmetic, so
  ``Device::supports_dtype`` is true; burn-ndarray backend.rs: F16 and BF16 have none, so the
  probe refuses the whole program (status ``unsupported``), and a move onto ndarray in a bf16 or
  f16 program is answered ``unsupported`` after the probe asks ``Device::supports_dtype``: ndarray
  cannot hold the tensor (an initialised param panics in its ``from_data_owned``, tensor.rs:
  ``unimplemented!("Unsupported dtype {other:?}")``; a lazy one at its first read, after which the
  probe process hangs at the next read).
- burn-optim sgd.rs: ``tensor - grad * lr`` in the param's own dtype; adam.rs: at the first step
  ``lr * m̂ / (√v̂ + ε)``, about ``lr`` per element, in the param's dtype.
- burn-core store/mod.rs: a record or a checkpoint file stores the dtype the module holds and a
  load adopts it (``DTypePolicy::FromRecord``, the default).
- burn-nn batch.rs: a training forward ``update``s the running states with
  ``(1 - momentum) * running + momentum * batch``; ``valid`` syncs them (running.rs).
"""

from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest

from harness.case import ops as op_table
from harness.case.case_file import load_case
from harness.case.ir import Program, TensorDecl, check_program
from harness.case.layers import LayerDecl
from harness.paths import cargo_target_dir, probe_binary
from harness.targets.burn.reproducer import SCAFFOLD
from harness.targets.reproducers import parse_output, prepare_cargo_build, trace_states, write_project
from harness.targets.rust_reproducer import rust_main
from tests.conftest import need, repro_json_alone, targets_runner

W = TensorDecl("w", "param", (2, 2), (1.0, 2.0, 3.0, 4.0))
X = TensorDecl("x", "buffer", (2, 2), (1.0, 2.0, 3.0, 6.0))
STEP = {"op": "step", "optimizer": "sgd", "lr": 0.5}


@pytest.fixture(scope="module")
def burn():
    """The burn targets only (burn:flex, burn:ndarray): this module needs no other probe."""
    with targets_runner(("burn:flex", "burn:ndarray"), env={"BURN_PROBE_NO_GPU": "1"}) as runner:
        yield runner


def _run(burn, dtype: str, tensors, ops, layers=()):
    tensors = tuple(tensors)
    program = Program(
        tensors, check_program(tensors, ops, layers=layers, dtype=dtype), dtype=dtype, layers=tuple(layers)
    )
    return program, burn.run_one(program, every_target=True)


def _ok(trace) -> None:
    assert trace.status == "ok", trace.message
    assert [s.status for s in trace.steps] == ["ok"] * len(trace.steps), trace.steps


def _flat(trace, i: int, name: str) -> list[float]:
    return trace.state_after(i)[name].value.ravel().tolist()


def _exact_in(dtype: str, values) -> bool:
    a = np.asarray(values, np.float32)
    back = op_table.bf16_rounded(a) if dtype == "bf16" else a.astype(np.float16).astype(np.float32)
    return back.tobytes() == a.tobytes()


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_every_declared_tensor_is_made_in_the_programs_dtype(burn, dtype):
    lazies = [
        TensorDecl("lc", "lazy", (2,), init="const", fill=3.0),
        TensorDecl("lu", "lazy", (2,), init="uniform", seed=7),
        TensorDecl("lr", "lazy", (2,), init="program_rng"),
    ]
    _, traces = _run(burn, dtype, [W, X, *lazies], [{"op": "read", "target": n} for n in ("lc", "lu", "lr")])
    t = traces["burn:flex"]
    _ok(t)
    assert (t.initial["w"].dtype, t.initial["x"].dtype) == (dtype, dtype)
    assert t.initial["w"].value.ravel().tolist() == [1, 2, 3, 4] and t.initial["w"].requires_grad
    # An uninitialised lazy param has no tensor to ask: no dtype until its first read.
    assert all(t.initial[n].dtype is None and not t.initial[n].initialized for n in ("lc", "lu", "lr"))
    final = t.state_after(2)
    assert all(final[n].dtype == dtype for n in ("lc", "lu", "lr"))
    assert final["lc"].value.tolist() == [3.0, 3.0]
    for n in ("lu", "lr"):  # Tensor::random in the dtype: uniform in [-1, 1), values of the dtype
        v = final[n].value
        assert np.all((v >= -1) & (v < 1)) and _exact_in(dtype, v), (n, v)


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_ndarray_refuses_the_whole_program(burn, dtype):
    _, traces = _run(burn, dtype, [W], [STEP])
    nd = traces["burn:ndarray"]
    assert nd.status == "unsupported" and nd.message == f"ndarray has no {dtype} (Device::supports_dtype)"
    _ok(traces["burn:flex"])


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_an_sgd_step_of_lr_half_is_exact(burn, dtype):
    w = TensorDecl("w", "param", (2, 2), (1.0, 2.0, 3.0, 4.0), grad=(1.0, 2.0, 3.0, 4.0))
    _, traces = _run(burn, dtype, [w], [STEP, STEP])
    t = traces["burn:flex"]
    _ok(t)
    assert _flat(t, 0, "w") == [0.5, 1.0, 1.5, 2.0] and _flat(t, 1, "w") == [0.0, 0.0, 0.0, 0.0]
    assert t.state_after(1)["w"].dtype == dtype and t.state_after(1)["w"].requires_grad


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("optimizer", ["sgd_momentum", "adam", "adamw"])
def test_the_other_optimizers_step_a_param_in_its_dtype(burn, dtype, optimizer):
    step = {"op": "step", "optimizer": optimizer, "lr": 0.5, "momentum": 0.5, "weight_decay": 0.0}
    _, traces = _run(burn, dtype, [W], [step, step])
    t = traces["burn:flex"]
    _ok(t)
    for i in (0, 1):
        o = t.state_after(i)["w"]
        assert o.dtype == dtype and _exact_in(dtype, o.value), (i, o)
    moved = np.array([1, 2, 3, 4]) - np.array(_flat(t, 0, "w"))
    if optimizer == "sgd_momentum":  # the first step has no history: lr * g
        assert moved.tolist() == [0.5] * 4
        assert _flat(t, 1, "w") == [-0.25, 0.75, 1.75, 2.75]  # buf = 0.5 * 1 + 1: a step of 0.75
    else:  # lr * m̂ / (√v̂ + ε) = lr * g / (|g| + ε), rounded in the dtype
        assert np.allclose(moved, 0.5, atol=2**-6), moved


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_the_dtype_conversions_keep_the_dtype_and_are_values(burn, dtype):
    methods = ("to_same_dtype", "via_f32", "via_bf16", "to_host", "state_dict", "save_load")
    snaps = [{"op": "snapshot", "name": m, "of": "w", "method": m} for m in methods]
    _, traces = _run(
        burn, dtype, [W], [*snaps, {"op": "write", "target": "w", "index": 0, "value": [10.0, 10.0]}, STEP]
    )
    t = traces["burn:flex"]
    _ok(t)
    last = len(methods) + 1
    assert _flat(t, last, "w") == [9.5, 9.5, 2.5, 3.5]
    for m in methods:
        o = t.state_after(last)[m]
        # cast.rs: to the own dtype, the tensor itself; via f32 or bf16 and back: the dtype again
        # (1..4 are exact in bf16); records adopt the stored dtype. A burn tensor is a value.
        assert o.dtype == dtype and o.value.ravel().tolist() == [1, 2, 3, 4], (m, o)


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_written_values_are_made_in_the_targets_dtype(burn, dtype):
    b, c = TensorDecl("b", "buffer", (2,), (1.0, 2.0)), TensorDecl("c", "buffer", (2,), (6.0, 7.0))
    ops = [
        {"op": "write", "target": "w", "index": 1, "value": [8.0, 9.0]},
        {"op": "assign", "target": "w", "index": 0, "source": "c"},
        {"op": "write", "target": "b", "value": [3.0, 4.0]},
        {"op": "fill", "target": "b", "value": 5.0},
        {"op": "scale", "target": "b", "factor": 2.0},
        {"op": "map", "target": "b", "fn": "add_scalar"},
        {"op": "add", "target": "b", "other": "b"},
        {"op": "append", "target": "b", "source": "b", "how": "cache"},
        {"op": "append", "target": "b", "source": "c", "how": "cat"},
    ]
    _, traces = _run(burn, dtype, [W, b, c], ops)
    t = traces["burn:flex"]
    _ok(t)
    assert _flat(t, 0, "w") == [1, 2, 8, 9] and _flat(t, 1, "w") == [6, 7, 8, 9]
    want_b = [[3, 4], [5, 5], [10, 10], [11, 11], [22, 22], [22, 22, 22, 22], [22, 22, 22, 22, 6, 7]]
    for i, want in enumerate(want_b, start=2):
        assert _flat(t, i, "b") == want and t.state_after(i)["b"].dtype == dtype, i
    assert all(t.state_after(i)["w"].dtype == dtype for i in range(len(ops)))


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_a_batch_norm_keeps_its_running_statistics_in_the_dtype(burn, dtype):
    bn = LayerDecl("bn", "batch_norm", features=2, momentum=0.5)
    ops = [
        {"op": "forward", "name": "y", "layer": "bn", "input": "x"},
        {"op": "valid"},
        {"op": "save", "name": "c", "to": "file"},
    ]
    _, traces = _run(burn, dtype, [W, X], ops, layers=[bn])
    _, f32 = _run(burn, "f32", [W, X], ops, layers=[bn])
    t = traces["burn:flex"]
    _ok(t)
    assert t.initial["bn.running_mean"].dtype == t.initial["bn.running_var"].dtype == dtype
    assert t.initial["bn.running_mean"].value.tolist() == [0, 0]
    assert t.initial["bn.running_var"].value.tolist() == [1, 1]
    end = t.state_after(2)
    # batch means [2, 4], momentum 0.5: [1, 2], exact in every dtype, as in the f32 program.
    assert (
        end["bn.running_mean"].value.tolist()
        == [1, 2]
        == f32["burn:flex"].state_after(2)["bn.running_mean"].value.tolist()
    )
    for n in ("y", "bn.running_mean", "bn.running_var", "c.bn.running_mean", "c.bn.running_var", "c.w"):
        assert end[n].dtype == dtype, n
    assert end["y"].value.ravel().tolist() == [-1, -1, 1, 1]  # each feature normalised over the batch


@pytest.mark.parametrize("kind", ["param", "lazy"])
def test_a_move_to_ndarray_in_a_bf16_program_is_unsupported_and_the_program_goes_on(burn, kind):
    w = W if kind == "param" else TensorDecl("w", "lazy", (2, 2), init="const", fill=1.0)
    _, traces = _run(
        burn,
        "bf16",
        [w],
        [{"op": "move", "target": "w", "device": "alt", "method": "to"}, {"op": "read", "target": "w"}, STEP],
    )
    t = traces["burn:flex"]
    assert t.steps[0].status == "unsupported" and "has no BF16" in t.steps[0].message, t.steps[0]
    # the param stayed on flex: it is read and trained there
    assert [s.status for s in t.steps[1:]] == ["ok", "ok"]
    assert t.state_after(2)["w"].device == t.state_after(-1)["w"].device
    assert t.state_after(2)["w"].value.ravel().tolist() == ([0.5, 1.5, 2.5, 3.5] if kind == "param" else [0.5] * 4)


def test_an_f32_program_keeps_its_dtype_and_opens_on_ndarray(burn):
    _, traces = _run(burn, "f32", [W], [{"op": "snapshot", "name": "s", "of": "w", "method": "via_f32"}, STEP])
    for target in ("burn:flex", "burn:ndarray"):
        t = traces[target]
        _ok(t)
        assert t.state_after(1)["s"].dtype == t.state_after(1)["w"].dtype == "f32", target
        assert _flat(t, 1, "s") == [1, 2, 3, 4] and _flat(t, 1, "w") == [0.5, 1.5, 2.5, 3.5], target


# ------------------------------------------------------------------------------------------------
# The reproducer.

CASE = """format = "aliasfuzz-case/1"
title = "a bf16 program on burn"
dtype = "bf16"

[tensors]
w  = { kind = "param",  value = [[1.0, 2.0], [3.0, 4.0]], grad = [[1.0, 2.0], [3.0, 4.0]] }
x  = { kind = "buffer", value = [[1.0, 2.0], [3.0, 6.0]] }
lc = { kind = "lazy", shape = [2], init = "const", fill = 3.0 }
lu = { kind = "lazy", shape = [2], init = "uniform", seed = 7 }

[layers]
bn = { kind = "batch_norm", features = 2, momentum = 0.5 }

[[ops]]
op = "snapshot"
name = "s"
of = "w"
method = "to_same_dtype"

[[ops]]
op = "snapshot"
name = "f"
of = "w"
method = "via_f32"

[[ops]]
op = "snapshot"
name = "r"
of = "w"
method = "save_load"

[[ops]]
op = "write"
target = "w"
index = 0
value = [10.0, 10.0]

[[ops]]
op = "forward"
name = "y"
layer = "bn"
input = "x"

[[ops]]
op = "read"
target = "lu"

[[ops]]
op = "step"
optimizer = "adam"
lr = 0.5

[[ops]]
op = "valid"
"""


def test_the_reproducer_declares_the_dtype():
    """The reproducer is the probe's transcript: the calls that take a dtype are given the
    program's, and those that take none are made in it by other calls (session/make.rs,
    layers.rs, records.rs)."""
    import tomllib

    from harness.case.case_file import parse_case

    if not probe_binary("burn_probe").exists():
        need("the burn probe", "build the probes with `make probes`")
    text = "".join(rust_main(SCAFFOLD, parse_case(tomllib.loads(CASE))).split())  # rustfmt's breaks aside
    assert "letdtype=FloatDType::BF16;" in text
    for call in (
        "Param::from_tensor(Tensor::from_data(TensorData::new(",  # Param::from_data takes no dtype
        "(&dev,DType::from(dtype))",
        "Tensor::full([2],3.0f32,(device,DType::from(dtype)))",  # nor does Initializer::Constant
        "device.seed(7);",
        "BatchNormConfig::new(2).with_momentum(0.5).init(&dev).map(&mutCast(dtype))",  # nor a config
        ".cast(dtype)",
        ".cast(FloatDType::F32).cast(dtype)",
        ".save_file(&r_path)?;",
        "DType::from(dtype)",
    ):
        assert call in text, call


def test_the_bf16_reproducer_prints_what_the_probe_observed(tmp_path):
    if not probe_binary("burn_probe").exists():
        need("the burn probe", "build the probes with `make probes`")
    if shutil.which("cargo") is None:
        need("cargo", "install Rust from https://rustup.rs")
    case = tmp_path / "bf16.toml"
    case.write_text(CASE)
    doc = repro_json_alone(case, "burn:flex")
    tj = doc["targets"]["burn:flex"]
    assert tj["status"] == "ok" and all(s["status"] == "ok" for s in tj["ops"]), tj
    proj = write_project(load_case(case), "burn", tmp_path / "repro-burn", unify_with_probes=True)
    prepare_cargo_build(proj)
    env = {**os.environ, "CARGO_TARGET_DIR": str(cargo_target_dir())}
    run = subprocess.run(["cargo", "run", "-q"], cwd=proj, env=env, capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, run.stderr[-4000:]
    assert "warning" not in run.stderr, run.stderr[-4000:]
    printed, observed = parse_output(run.stdout), trace_states(tj)
    assert observed[6]["w"] != [10.0, 10.0, 3.0, 4.0]  # adam moved it (in bf16)
    for step, names in observed.items():
        for name, want in names.items():  # Rust prints an f32 by its shortest round-trip digits
            have = printed[step][name]
            same = have == want if isinstance(want, str) else np.array_equal(np.float32(have), np.float32(want))
            assert same, (step, name, have, want)
