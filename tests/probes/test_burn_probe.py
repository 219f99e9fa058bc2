"""The burn probe (issue #4), driven directly over the probe protocol.

Every expectation below is burn 0.22.1 behaviour on its CPU backends (flex, ndarray) and on any
accelerator the build opens here (wgpu with `FULL=1` on a Vulkan driver), read from the
crate sources (``~/.cargo/registry/src/*/burn-core-0.22.1``, ``burn-tensor-0.22.1``,
``burn-optim-0.22.1``, ``burn-nn-0.22.1``); each one cites the file and function it comes from.
The tests talk JSON lines to ``rust_probes/target/debug/burn_probe`` and validate every message
against ``rust_probes/protocol/schema/protocol.schema.json``.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from harness.targets.protocol import PROTOCOL_VERSION
from tests.support.probe_client import BURN_TARGETS, ROOT, states
from tests.support.probe_client import Probe as ProbeClient

# Every device-parametrized test below holds on each device: the expectations come from burn-core,
# burn-tensor and burn-optim, which sit above the backend.
DEVICES = [t.split(":", 1)[1] for t in BURN_TARGETS]
ALT = {"flex": "ndarray", "ndarray": "flex", **{d: "flex" for d in DEVICES[2:]}}

W = [[1.0, 2.0], [3.0, 4.0]]  # the param most tests snapshot
W_FLAT = [1.0, 2.0, 3.0, 4.0]


def Probe(no_gpu: bool = False) -> ProbeClient:
    return ProbeClient("burn_probe", "flex", timeout_s=120.0, env={"BURN_PROBE_NO_GPU": "1" if no_gpu else "0"})


@pytest.fixture(scope="module")
def probe():
    p = Probe()
    yield p
    p.close()


def ok(trace: dict) -> list[dict]:
    assert trace["status"] == "ok", trace.get("message")
    for i, s in enumerate(trace["steps"]):
        assert s["status"] == "ok", (i, s)
    return states(trace)


def close(obs: dict, expected, tol: float = 1e-5) -> bool:
    return obs["value"] is not None and np.allclose(obs["value"], np.ravel(expected), atol=tol)


# Program pieces (the wire form: every op field present, as the harness sends it).
def param(name="w", value=W, grad=None, kind="param"):
    arr = np.asarray(value, dtype=float)
    t = {"name": name, "kind": kind, "shape": list(arr.shape), "value": arr.ravel().tolist()}
    if grad is not None:
        t["grad"] = np.ravel(grad).tolist()
    return t


def lazy(name="lz", shape=(2,), init="const", fill=3.0, seed=7):
    return {"name": name, "kind": "lazy", "shape": list(shape), "init": init, "fill": fill, "seed": seed}


def snap(name, of, method):
    return {"op": "snapshot", "name": name, "of": of, "method": method}


def write(target, value, index=None):
    return {"op": "write", "target": target, "index": index, "value": list(value)}


def step(optimizer="sgd", lr=0.5, momentum=0.0, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
    return {
        "op": "step",
        "optimizer": optimizer,
        "lr": lr,
        "momentum": momentum,
        "dampening": 0.0,
        "betas": list(betas),
        "eps": eps,
        "weight_decay": weight_decay,
    }


def move(target, device, method):
    return {"op": "move", "target": target, "device": device, "method": method}


# ---------------------------------------------------------------------------------------------
# Handshake.


def test_hello(probe):
    h = probe.hello()
    assert h["protocol"] == PROTOCOL_VERSION and h["framework"] == "burn"
    lock = (ROOT / "rust_probes" / "Cargo.lock").read_text()
    locked = re.search(r'name = "burn"\nversion = "([^"]+)"', lock).group(1)
    assert h["versions"]["burn"] == locked == "0.22.1"
    cargo = (ROOT / "rust_probes" / "burn_probe" / "Cargo.toml").read_text()
    assert f'version = "={locked}"' in cargo
    assert h["versions"]["burn_probe"]
    devices = {d["name"]: d for d in h["devices"]}
    assert devices["flex"] == {"name": "flex", "alt": "ndarray", "kind": "cpu"}
    assert devices["ndarray"] == {"name": "ndarray", "alt": "flex", "kind": "cpu"}
    for name in DEVICES[2:]:
        assert devices[name] == {"name": name, "alt": "flex", "kind": "gpu"}
    assert len(devices) == len(DEVICES)
    no_gpu = Probe(no_gpu=True)  # BURN_PROBE_NO_GPU=1 lists no accelerator, built or not
    try:
        assert [d["name"] for d in no_gpu.hello()["devices"]] == ["flex", "ndarray"]
    finally:
        no_gpu.close()
    from harness.case.ops import OP_KINDS

    assert h["ops"] == list(OP_KINDS)  # burn interprets every op (some answer unsupported per input)
    # No burn call for these (see test_unsupported_methods).
    assert not {"contiguous", "copy", "deepcopy"} & set(h["methods"])
    assert {"to_same_dtype", "via_bf16", "via_f32"} <= set(h["methods"])  # tests/probes/test_declared_dtypes_burn.py
    assert len(h["methods"]) == 23  # the 12 above, the shape-derived views (tests/probes/test_views.py), the dtype ones


def test_hello_other_protocol_still_answers_its_own_number(probe):
    assert probe.request({"type": "hello", "protocol": 99})["protocol"] == PROTOCOL_VERSION


# ---------------------------------------------------------------------------------------------
# Snapshots. Burn tensors are values: `Tensor::clone` is a reference-counted handle and every op
# returns a new tensor; a backend reuses a buffer in place only when its handle is the sole owner
# (burn-flex: Arc strong count 1 / copy-on-write; burn-ndarray: `ArcArray::is_unique`). The
# optimizer rebinds the param to `tensor - delta` (burn-optim sgd.rs `Sgd::step`) under
# `Param::map`-style `consume` + `from_mapped_value` (optim/module/module_optimizer.rs
# `ModuleOptimizerMapper::map_float`), and `write` rebinds with `slice_assign`. So no snapshot
# may see a later step or write of its source: any that does is a burn aliasing bug.

METHODS = [
    "alias",
    "clone",
    "detach",
    "mul1",
    "to_home",
    "to_cpu",
    "reshape",
    "view_row",
    "transpose",
    "state_dict",
    "to_host",
    "save_load",
]

# What each snapshot holds of W, and its shape.
SNAP_VALUE = {
    "reshape": (W_FLAT, [4]),
    "view_row": ([1.0, 2.0], [1, 2]),  # Tensor::slice([0..1]) keeps the rank
    "transpose": ([1.0, 3.0, 2.0, 4.0], [2, 2]),  # Tensor::transpose swaps the last two dims
}
# Snapshots that are Params and so carry a ParamId (alias = Param::clone; state_dict/save_load
# load the recorded id: burn-core store/mod.rs `ModuleRecordMapper` + `Param::transform_for_load`).
PARAM_SNAPS = {"alias", "state_dict", "save_load"}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("method", METHODS)
def test_snapshot_across_step(probe, device, method):
    t = probe.run([param()], [snap("s", "w", method), step(lr=0.5)], device=device)
    after_snap, after_step = ok(t)
    value, shape = SNAP_VALUE.get(method, (W_FLAT, [2, 2]))
    s = after_snap["s"]
    assert s["shape"] == shape and close(s, value), s
    assert s["initialized"] is True
    w_id = t["initial"]["w"]["identity"]
    assert w_id is not None
    if method in PARAM_SNAPS:
        assert s["identity"] == w_id, "ParamId kept"
    else:
        assert s["identity"] is None, "plain tensors have no ParamId"
    assert s["device"] == ("flex" if method == "to_cpu" else device)
    # The step trained w (sgd: w - lr * g, g = ones) and left the snapshot alone.
    assert close(after_step["w"], np.asarray(W_FLAT) - 0.5)
    assert after_step["w"]["identity"] == w_id, "the optimizer keeps the ParamId"
    assert after_step["s"] == s


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("method", METHODS)
def test_snapshot_across_write_of_source(probe, device, method):
    t = probe.run([param()], [snap("s", "w", method), write("w", [9.0, 9.0], index=0)], device=device)
    after_snap, after_write = ok(t)
    assert close(after_write["w"], [9.0, 9.0, 3.0, 4.0])
    # Param::map keeps the ParamId (burn-core param/base.rs `Param::map`).
    assert after_write["w"]["identity"] == t["initial"]["w"]["identity"]
    assert after_write["w"]["requires_grad"] is True
    assert after_write["s"] == after_snap["s"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("method", METHODS)
def test_write_to_snapshot_rebinds_only_the_snapshot(probe, device, method):
    value, shape = SNAP_VALUE.get(method, (W_FLAT, [2, 2]))
    row = [7.0] * (int(np.prod(shape)) // shape[0])
    t = probe.run(
        [param()],
        [
            snap("s", "w", method),
            write("s", row, index=0),
            {"op": "fill", "target": "s", "value": 5.0},
            {"op": "scale", "target": "s", "factor": 2.0},
        ],
        device=device,
    )
    _, after_write, after_fill, after_scale = ok(t)
    expect = np.asarray(value).reshape(shape).copy()
    expect[0] = 7.0
    assert close(after_write["s"], expect)
    assert close(after_fill["s"], np.full(shape, 5.0))
    assert close(after_scale["s"], np.full(shape, 10.0))
    for st in (after_write, after_fill, after_scale):
        assert st["w"] == t["initial"]["w"], "the source is untouched"


@pytest.mark.parametrize("method", ["contiguous", "copy", "deepcopy"])
def test_unsupported_methods(probe, method):
    # burn-tensor 0.22.1 has no contiguous / copy_ call, and no deep copy (Param::clone shares
    # the lazy state: burn-core param/base.rs `impl Clone for Param`).
    t = probe.run([param()], [snap("s", "w", method), snap("s2", "s", "clone")])
    assert t["steps"][0]["status"] == "unsupported" and t["steps"][0]["message"]
    assert t["steps"][1]["status"] == "skipped"


def test_buffer_state_dict_is_unsupported(probe):
    # A plain tensor in a module is a constant whose `visit` records nothing (burn-core
    # module/param/constant.rs `impl Module for Tensor`, "TODO: tensor record should persist").
    t = probe.run([param("b", kind="buffer")], [snap("s", "b", "state_dict"), snap("s2", "b", "save_load")])
    assert [s["status"] for s in t["steps"]] == ["unsupported", "unsupported"]
    b = t["initial"]["b"]
    assert b["identity"] is None and b["requires_grad"] is False


# ---------------------------------------------------------------------------------------------
# Optimizers (burn-optim): one per distinct spec, created at its first step and reused.


@pytest.mark.parametrize("device", DEVICES)
def test_sgd_momentum_state_persists(probe, device):
    # momentum.rs `Momentum::transform`: v1 = g; v2 = m v1 + (1 - dampening) g, dampening 0.
    t = probe.run([param(value=[1.0, 2.0])], [step("sgd_momentum", lr=0.1, momentum=0.9)] * 2, device=device)
    s1, s2 = ok(t)
    assert close(s1["w"], [0.9, 1.9])
    assert close(s2["w"], [0.9 - 0.19, 1.9 - 0.19])


def test_distinct_specs_get_distinct_optimizers(probe):
    t = probe.run(
        [param(value=[1.0, 2.0])],
        [step("sgd_momentum", lr=0.1, momentum=0.9), step("sgd_momentum", lr=0.2, momentum=0.9)],
    )
    _, s2 = ok(t)
    assert close(s2["w"], [0.9 - 0.2, 1.9 - 0.2]), "the second spec starts without velocity"


def test_adam_and_adamw(probe):
    # adam.rs `AdaptiveMomentum::transform`: the first bias-corrected step is ~lr * sign(g).
    t = probe.run([param(value=[1.0, 2.0])], [step("adam", lr=0.1)])
    assert close(ok(t)[0]["w"], [0.9, 1.9], tol=1e-4)
    # adamw.rs `AdamW::step`: w (1 - lr wd) - lr * update.
    t = probe.run([param(value=[1.0, 2.0])], [step("adamw", lr=0.1, weight_decay=0.1)])
    assert close(ok(t)[0]["w"], [0.99 - 0.1, 1.98 - 0.1], tol=1e-4)


def test_grad_field_and_buffers(probe):
    t = probe.run([param(value=[1.0, 2.0], grad=[2.0, -1.0]), param("b", value=[5.0], kind="buffer")], [step(lr=0.5)])
    s = ok(t)[0]
    assert close(s["w"], [0.0, 2.5])
    assert "b" not in t["steps"][0]["changed"], "buffers are not trained"


# ---------------------------------------------------------------------------------------------
# move: Module::to_device / Module::fork on the Param (burn-core module/param/tensor.rs).
# module/base.rs `Module::to_device`: "The output model will be an intermediary model, meaning
# that you can't optimize it with gradient descent. If you want to optimize the output network on
# the target device, use fork instead" (burn #1890 / #1901). burn-tensor base.rs
# `Tensor::to_device`: a recorded op even to the same device; its output is a non-leaf.


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("where", ["home", "alt"])
@pytest.mark.parametrize("method", ["to", "fork"])
def test_move_then_step(probe, device, where, method):
    t = probe.run([param(value=[1.0, 2.0])], [move("w", where, method), step(lr=1.0)], device=device)
    after_move, after_step = ok(t)
    w0 = t["initial"]["w"]
    moved = after_move["w"]
    assert moved["device"] == (device if where == "home" else ALT[device])
    assert moved["identity"] == w0["identity"], "ParamId kept across to_device / fork"
    assert close(moved, [1.0, 2.0])
    trained = close(after_step["w"], [0.0, 1.0])
    if method == "fork":
        # fork: `tensor.to_device(device).detach()` then `require_grad()`: a new leaf that trains.
        assert moved["requires_grad"] is True
        assert trained, after_step["w"]
    else:
        # to_device: a non-leaf; no gradient is retained for it, so the optimizer skips it.
        assert not trained, after_step["w"]
        assert close(after_step["w"], [1.0, 2.0])


def replace(target, value, how):
    return {"op": "replace", "target": target, "value": value, "how": how}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("how", ["new", "data"])
def test_a_param_replaced_from_its_own_value_still_trains(probe, device, how):
    # `Param::from_tensor(w.val())` / `w.map(|_| w.val())`: `val()` is the param's tracked leaf,
    # which `require_grad` returns as it is (burn-autodiff tensor.rs `require_grad`: Grad => self),
    # so the param stays a leaf the step trains. Passed through a same-rank reshape (an op no user
    # writes here) it would be a non-leaf: `from_tensor` panics, `map` stops training.
    t = probe.run([param(value=[1.0, 2.0])], [replace("w", "w", how), step(lr=1.0)], device=device)
    after_replace, after_step = ok(t)
    assert close(after_replace["w"], [1.0, 2.0])
    assert after_replace["w"]["requires_grad"] is True
    assert close(after_step["w"], [0.0, 1.0]), after_step["w"]


@pytest.mark.parametrize("device", DEVICES)
def test_a_param_from_a_computed_tensor_panics(probe, device):
    # `Param::from_tensor(w.val() * 1)`: the product is a non-leaf node of the autodiff graph, and
    # `require_grad` on it panics (burn-autodiff tensor.rs: GradInBackward).
    t = probe.run(
        [param(value=[1.0, 2.0]), param("v", value=[3.0, 4.0])],
        [snap("s", "w", "mul1"), replace("v", "s", "new")],
        device=device,
    )
    assert [s["status"] for s in t["steps"]] == ["ok", "error"]
    assert "Can't convert a non leaf tensor into a tracked tensor" in t["steps"][1]["message"]


def test_move_cpu_and_plain_tensor_fork(probe):
    # A plain tensor is a Module constant whose fork is to_device (module/param/constant.rs).
    t = probe.run(
        [param(value=[1.0, 2.0], kind="buffer")], [move("w", "alt", "fork"), move("w", "cpu", "to")], device="flex"
    )
    a, b = ok(t)
    assert a["w"]["device"] == "ndarray" and b["w"]["device"] == "flex"
    assert close(b["w"], [1.0, 2.0]) and b["w"]["identity"] is None


# ---------------------------------------------------------------------------------------------
# Module ops and ParamId.


@pytest.mark.parametrize("device", DEVICES)
def test_param_id_kept_across_clone_valid_fork_save_load(probe, device):
    t = probe.run(
        [param()],
        [
            snap("a", "w", "alias"),
            {"op": "module_clone", "name": "m"},
            snap("sd", "w", "state_dict"),
            snap("sl", "w", "save_load"),
            move("w", "home", "fork"),
            {"op": "valid"},
        ],
        device=device,
    )
    st = ok(t)
    wid = t["initial"]["w"]["identity"]
    final = st[-1]
    for name in ["a", "m.w", "sd", "sl", "w"]:
        assert final[name]["identity"] == wid, name
    # Module::valid on a param: `Param::from_mapped_value(self.id, base.without_autodiff()
    # .set_require_grad(false))` (param/tensor.rs `valid`).
    assert final["w"]["requires_grad"] is False and close(final["w"], W_FLAT)


@pytest.mark.parametrize("device", DEVICES)
def test_step_after_valid_errors_and_train_restores(probe, device):
    # After valid the params have no autodiff; `Tensor::backward` asserts a tracked tensor
    # (burn-tensor api/autodiff.rs `backward`), so the step is an error. `train` restores the
    # configured training state (param/tensor.rs `train`), and the next step trains.
    t = probe.run(
        [param(value=[1.0, 2.0])], [{"op": "valid"}, step(lr=1.0), {"op": "train"}, step(lr=1.0)], device=device
    )
    st = states(t)
    assert [s["status"] for s in t["steps"]] == ["ok", "error", "ok", "ok"]
    assert "backward" in t["steps"][1]["message"]
    assert close(st[1]["w"], [1.0, 2.0])
    assert st[2]["w"]["requires_grad"] is True
    assert close(st[3]["w"], [0.0, 1.0])


@pytest.mark.parametrize("op", ["no_grad", "freeze"])
def test_no_grad_and_freeze_stop_training(probe, op):
    # module/base.rs `no_grad` = set_require_grad(false); `freeze` also disables flags; a later
    # `train` keeps gradients disabled ("it does not undo no_grad").
    t = probe.run([param(value=[1.0, 2.0])], [{"op": op}, step(lr=1.0), {"op": "train"}, step(lr=1.0)])
    st = states(t)
    assert st[0]["w"]["requires_grad"] is False
    assert t["steps"][1]["status"] == "error"
    assert st[2]["w"]["requires_grad"] is False
    assert t["steps"][3]["status"] == "error"
    assert close(st[3]["w"], [1.0, 2.0])


def test_module_clone_binds_every_param_and_is_a_value(probe):
    t = probe.run(
        [param("a", value=[1.0]), param("b", value=[[1.0, 2.0]]), lazy("c")],
        [{"op": "module_clone", "name": "m"}, step(lr=1.0)],
    )
    first, second = ok(t)
    assert {"m.a", "m.b", "m.c"} <= set(first)
    assert close(second["a"], [0.0]) and close(first["m.a"], [1.0]) and second["m.a"] == first["m.a"]


# ---------------------------------------------------------------------------------------------
# Lazy params: `Param::uninitialized` (burn-nn initializer.rs `Initializer::init`). Observation
# uses is_initialized / lazy_shape / lazy_device, which never run the initializer; clones share
# one `LazyInitState` (param/base.rs, burn #5040 / #5045), so whichever clone reads first
# initialises all of them with the same value.


@pytest.mark.parametrize("device", DEVICES)
def test_lazy_is_not_forced_by_observation(probe, device):
    t = probe.run([lazy()], [snap("a", "lz", "alias"), {"op": "module_clone", "name": "m"}], device=device)
    st = ok(t)
    for obs in [t["initial"]["lz"], st[-1]["lz"], st[-1]["a"], st[-1]["m.lz"]]:
        assert obs["initialized"] is False and obs["value"] is None and obs["shape"] == [2]
        assert obs["device"] == device and obs["identity"] == t["initial"]["lz"]["identity"]


@pytest.mark.parametrize("init", ["const", "uniform"])
def test_lazy_clone_before_read_shares_init(probe, init):
    t = probe.run(
        [lazy(init=init)],
        [{"op": "module_clone", "name": "m"}, snap("a", "lz", "alias"), {"op": "read", "target": "m.lz"}],
    )
    st = ok(t)
    after_read = st[-1]
    for name in ["lz", "m.lz", "a"]:
        assert after_read[name]["initialized"] is True, name
    assert after_read["lz"]["value"] == after_read["m.lz"]["value"] == after_read["a"]["value"]
    if init == "const":
        assert close(after_read["lz"], [3.0, 3.0])
    else:
        assert all(-1.0 <= x < 1.0 for x in after_read["lz"]["value"])


def test_lazy_read_then_clone_and_step(probe):
    t = probe.run([lazy()], [{"op": "read", "target": "lz"}, {"op": "module_clone", "name": "m"}, step(lr=1.0)])
    r, c, s = ok(t)
    assert close(r["lz"], [3.0, 3.0]) and r["lz"]["requires_grad"] is True
    assert close(s["lz"], [2.0, 2.0]) and close(s["m.lz"], [3.0, 3.0])


def test_lazy_forced_by_tensor_snapshot_and_step(probe):
    # A tensor method runs on `Param::val()`, which initialises (param/base.rs `val`).
    t = probe.run([lazy()], [snap("c", "lz", "clone")])
    assert ok(t)[0]["lz"]["initialized"] is True
    t = probe.run([lazy()], [step(lr=1.0)])
    assert close(ok(t)[0]["lz"], [2.0, 2.0])


@pytest.mark.parametrize("shared", [False, True])
def test_lazy_move_to_retargets_unless_shared(probe, shared):
    # module/base.rs `Module::to_device`: "A parameter not initialized yet initializes on the
    # destination, unless a clone shares it, in which case it initializes where it is and is then
    # moved" (param/base.rs `Param::map_to_device`: `Arc::get_mut` on the lazy state). Retargeted,
    # it initialises as a leaf on the destination and trains; moved, it is a non-leaf and does not.
    ops = ([snap("a", "lz", "alias")] if shared else []) + [move("lz", "alt", "to"), step(lr=1.0)]
    st = ok(probe.run([lazy()], ops, device="flex"))
    moved, stepped = st[-2]["lz"], st[-1]["lz"]
    assert moved["device"] == "ndarray"
    if shared:
        assert moved["initialized"] is True and moved["requires_grad"] is False
        assert st[-2]["a"]["device"] == "flex" and close(st[-2]["a"], [3.0, 3.0])
        assert close(stepped, [3.0, 3.0])
    else:
        assert moved["initialized"] is False
        assert close(stepped, [2.0, 2.0])


def test_valid_and_state_dict_initialise_lazy_params(probe):
    # param/tensor.rs `valid` reads `self.base()` (a deref: initialises); store/mod.rs
    # `Collector::visit_float` reads `param.transform_for_save().val()` on the model clone, whose
    # lazy state is the model's own.
    st = ok(probe.run([lazy()], [{"op": "valid"}]))
    assert st[0]["lz"]["initialized"] is True and st[0]["lz"]["requires_grad"] is False
    st = ok(probe.run([lazy()], [snap("sd", "lz", "state_dict")]))
    assert st[0]["lz"]["initialized"] is True and close(st[0]["sd"], [3.0, 3.0])


# ---------------------------------------------------------------------------------------------
# Robustness: the probe answers every line and keeps serving.


def test_robustness(probe):
    bad = probe.send_raw("this is not json")
    assert bad["type"] == "error" and bad["id"] is None
    bad = probe.send_raw(json.dumps({"type": "run", "id": 3}))
    assert bad["type"] == "error"
    # Unknown op: unsupported for that op alone; a malformed known op: error for that op alone.
    t = probe.run(
        [param()],
        [
            {"op": "teleport", "target": "w"},
            {"op": "write", "target": "w"},
            snap("s", "nope", "clone"),
            snap("s", "w", "clone"),
        ],
        valid_request=False,
    )
    assert [s["status"] for s in t["steps"]] == ["unsupported", "error", "skipped", "ok"]
    # A program that panics inside burn: backward on an untracked loss after `freeze`
    # (burn-tensor api/autodiff.rs `backward`'s assert), and a write rejected before burn sees it.
    t = probe.run([param()], [{"op": "freeze"}, step(), write("w", [1.0], index=5), snap("s", "w", "clone")])
    assert [s["status"] for s in t["steps"]] == ["ok", "error", "error", "ok"]
    assert t["steps"][1]["message"].startswith("panic")
    # Unknown device: the whole trace is an error.
    t = probe.run([param()], [], device="tpu")
    assert t["status"] == "error" and "unknown device" in t["message"]
    # Bad tensors: an error trace, not a crash.
    t = probe.run([{"name": "x", "kind": "param", "shape": [2], "value": [1.0]}], [])
    assert t["status"] == "error"
    # Still serving.
    assert probe.hello()["framework"] == "burn"
    t = probe.run([param()], [step()])
    assert ok(t)
