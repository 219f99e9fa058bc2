"""The candle probe (issue #3), driven directly over the probe protocol.

Every expectation below is candle-core / candle-nn 0.11.1 behaviour on CPU, read from the crate
sources (``~/.cargo/registry/src/*/candle-core-0.11.1``, ``candle-nn-0.11.1``); each one cites the
file and function it comes from. The tests talk JSON lines to ``rust_probes/target/debug/candle_probe``
and validate every message against ``rust_probes/protocol/schema/protocol.schema.json``.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from harness.targets.protocol import PROTOCOL_VERSION
from tests.support.probe_client import ROOT, states
from tests.support.probe_client import Probe as ProbeClient

W = [[1.0, 2.0], [3.0, 4.0]]  # the param most tests snapshot
W_FLAT = [1.0, 2.0, 3.0, 4.0]


def Probe() -> ProbeClient:
    return ProbeClient("candle_probe", "cpu", timeout_s=60.0)


@pytest.fixture(scope="module")
def probe():
    p = Probe()
    p.hello()
    yield p
    p.close()


# ---------------------------------------------------------------------------------------------
# Program helpers: the wire form with every field present (as the harness sends it).


def param(name, value, grad=None):
    arr = np.asarray(value, dtype=np.float32)
    t = {"name": name, "kind": "param", "shape": list(arr.shape), "value": arr.ravel().tolist()}
    if grad is not None:
        t["grad"] = np.asarray(grad, dtype=np.float32).ravel().tolist()
    return t


def buffer(name, value):
    arr = np.asarray(value, dtype=np.float32)
    return {"name": name, "kind": "buffer", "shape": list(arr.shape), "value": arr.ravel().tolist()}


def snap(name, of, method):
    return {"op": "snapshot", "name": name, "of": of, "method": method}


def write(target, value, index=None):
    return {
        "op": "write",
        "target": target,
        "index": index,
        "value": np.asarray(value, dtype=np.float32).ravel().tolist(),
    }


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


def statuses(trace: dict) -> list[str]:
    return [s["status"] for s in trace["steps"]]


# ---------------------------------------------------------------------------------------------
# Handshake


def _lock_version(krate: str) -> str:
    lock = (ROOT / "rust_probes" / "Cargo.lock").read_text()
    m = re.search(rf'name = "{re.escape(krate)}"\nversion = "([^"]+)"', lock)
    assert m, f"{krate} not in Cargo.lock"
    return m.group(1)


def test_hello(probe):
    h = probe.hello()
    assert h["protocol"] == PROTOCOL_VERSION
    assert h["framework"] == "candle"
    assert h["versions"]["candle-core"] == _lock_version("candle-core")
    ws = (ROOT / "rust_probes" / "Cargo.toml").read_text()
    assert h["versions"]["candle_probe"] == re.search(r'^version = "([^"]+)"', ws, re.M).group(1)
    names = [d["name"] for d in h["devices"]]
    assert names[0] == "cpu" and h["devices"][0]["kind"] == "cpu"
    if len(names) == 1:  # CPU-only build (no `cuda`/`metal` feature or no device)
        assert h["devices"][0]["alt"] is None
    else:
        assert h["devices"][0]["alt"] == names[1] and h["devices"][1]["alt"] == "cpu"
    # every op but no_grad and freeze (candle has no requires-grad switch: test_module_modes_unsupported);
    # valid/train set the flag ModuleT::forward_t is given (tests/probes/test_layers_candle.py)
    assert set(h["ops"]) == {
        "snapshot",
        "write",
        "fill",
        "scale",
        "step",
        "backward",
        "backward_of",
        "set_lr",
        "move",
        "module_clone",
        "read",
        "assign",
        "save",
        "load",
        "replace",
        "append",
        "valid",
        "train",
        "forward",
        "map",
        "add",
    }
    # deepcopy: candle has no deep-copy call (no such fn in candle-core/src/tensor.rs)
    assert "deepcopy" not in h["methods"]
    assert set(h["methods"]) == {
        "alias",
        "clone",
        "detach",
        "copy",
        "mul1",
        "to_home",
        "to_cpu",
        "contiguous",
        "reshape",
        "view_row",
        "transpose",
        "state_dict",
        "to_host",
        "save_load",
        "expand",
        "permute",
        "flip",
        "narrow",
        "unsqueeze",
        "squeeze",
        "chunk",
        "select",  # the views: tests/probes/test_views.py
        "to_same_dtype",
        "via_bf16",  # tests/probes/test_dtypes.py
        "via_f32",
    }  # tests/probes/test_declared_dtypes_candle.py


# ---------------------------------------------------------------------------------------------
# Snapshot methods: does the snapshot follow its source across a step / a row write, and does a
# write into the snapshot reach the param?
#
# SHARES: the snapshot's tensor shares the param's storage, so an optimizer step (`Var::set`,
# variable.rs, copies into the existing storage) and a `slice_set` on the param show through.
# SAME_ID: the snapshot is the param's own Tensor (same `Tensor::id`).
SNAPSHOT_EXPECT = {
    # method: (shares storage, same id, requires_grad (is_variable), shape)
    "alias": (True, True, True, [2, 2]),  # the same handle
    "clone": (True, True, True, [2, 2]),  # Var derives Clone over Arc<Tensor_> (variable.rs)
    "detach": (True, False, False, [2, 2]),  # tensor.rs `detach`: new id, `storage: self.storage.clone()`
    "copy": (False, False, False, [2, 2]),  # tensor.rs `copy`: `storage().try_clone(..)`
    "mul1": (False, False, False, [2, 2]),  # tensor.rs bin_trait Mul<f64> -> `affine`: new storage
    "to_home": (True, True, True, [2, 2]),  # tensor.rs `to_device`: same device -> `self.clone()`
    "to_cpu": (True, True, True, [2, 2]),  # same, the home device is the CPU here
    "contiguous": (True, True, True, [2, 2]),  # tensor.rs `contiguous`: contiguous -> `self.clone()`
    "reshape": (True, False, False, [4]),  # tensor.rs `reshape`: contiguous -> shares storage, new id
    "view_row": (True, False, False, [1, 2]),  # tensor.rs `narrow`: new layout over the same storage
    "transpose": (True, False, False, [2, 2]),  # tensor.rs `t`/`transpose`: shares storage
    "state_dict": (True, True, True, [2, 2]),  # var_map.rs `data()`: the very Var the model holds
    "to_host": (False, False, False, [2, 2]),  # `to_vec1` then `Tensor::new`: new storage
    "save_load": (False, False, True, [2, 2]),  # var_map.rs `load` -> `Var::set` into a fresh Var
}


def _view(method: str, flat: list[float]) -> list[float]:
    """What a snapshot sharing storage shows of the param's row-major values."""
    a = np.asarray(flat, dtype=np.float32).reshape(2, 2)
    if method == "view_row":
        a = a[:1]
    elif method == "transpose":
        a = a.T
    return a.ravel().tolist()


@pytest.mark.parametrize("method", sorted(SNAPSHOT_EXPECT))
def test_snapshot_across_step(probe, method):
    shares, same_id, rg, shape = SNAPSHOT_EXPECT[method]
    tr = probe.run([param("w", W)], [snap("s", "w", method), step("sgd", lr=0.5)])
    assert statuses(tr) == ["ok", "ok"], tr["steps"]
    after_snap, after_step = states(tr)
    s0 = after_snap["s"]
    assert s0["shape"] == shape and s0["device"] == "cpu" and s0["initialized"] is True
    assert s0["value"] == _view(method, W_FLAT)
    assert s0["requires_grad"] is rg
    assert (s0["identity"] == after_snap["w"]["identity"]) is same_id
    # SGD (optim.rs `SGD::step`): w - 0.5 * 1
    trained = [0.5, 1.5, 2.5, 3.5]
    assert after_step["w"]["value"] == trained
    assert after_step["s"]["value"] == _view(method, trained if shares else W_FLAT)


@pytest.mark.parametrize("method", sorted(SNAPSHOT_EXPECT))
def test_snapshot_across_row_write(probe, method):
    shares = SNAPSHOT_EXPECT[method][0]
    # tensor_cat.rs `slice_set`: copies the row into the param's storage in place
    tr = probe.run([param("w", W)], [snap("s", "w", method), write("w", [10, 20], index=0)])
    assert statuses(tr) == ["ok", "ok"], tr["steps"]
    final = states(tr)[-1]
    written = [10.0, 20.0, 3.0, 4.0]
    assert final["w"]["value"] == written
    assert final["s"]["value"] == _view(method, written if shares else W_FLAT)


def test_deepcopy_unsupported(probe):
    # candle has no deep-copy call; the probe never substitutes `copy`
    tr = probe.run([param("w", W)], [snap("s", "w", "deepcopy"), {"op": "read", "target": "s"}])
    assert statuses(tr) == ["unsupported", "skipped"]
    assert "deep" in tr["steps"][0]["message"]
    assert "s" not in states(tr)[-1]


# Reverse writes: a row write (index 0) into the snapshot; the reshape snapshot is rank 1, so its
# "row" 1 is the param's element 1.
REVERSE = {
    "alias": [7, 8, 3, 4],
    "clone": [7, 8, 3, 4],
    "detach": [7, 8, 3, 4],
    "copy": W_FLAT,
    "mul1": W_FLAT,
    "to_home": [7, 8, 3, 4],
    "to_cpu": [7, 8, 3, 4],
    "contiguous": [7, 8, 3, 4],
    "view_row": [7, 8, 3, 4],
    "state_dict": [7, 8, 3, 4],
    "to_host": W_FLAT,
    "save_load": W_FLAT,
}


@pytest.mark.parametrize("method", sorted(REVERSE))
def test_reverse_row_write(probe, method):
    tr = probe.run([param("w", W)], [snap("s", "w", method), write("s", [7, 8], index=0)])
    assert statuses(tr) == ["ok", "ok"], tr["steps"]
    final = states(tr)[-1]
    assert final["s"]["value"][:2] == [7.0, 8.0]
    assert final["w"]["value"] == [float(x) for x in REVERSE[method]]


def test_reverse_write_reshape(probe):
    # reshape shares the storage (tensor.rs `reshape`): slice_set of element 1 reaches w[0][1]
    tr = probe.run([param("w", W)], [snap("s", "w", "reshape"), write("s", [9], index=1)])
    assert statuses(tr) == ["ok", "ok"]
    assert states(tr)[-1]["w"]["value"] == [1.0, 9.0, 3.0, 4.0]


def test_reverse_write_transpose_errors_fill_reaches(probe):
    # tensor_cat.rs `slice_set`: `RequiresContiguous { op: "slice-set" }` on the transposed view;
    # tensor.rs `const_set` goes through the strided layout and writes the shared storage.
    tr = probe.run(
        [param("w", W)],
        [snap("s", "w", "transpose"), write("s", [7, 8], index=0), {"op": "fill", "target": "s", "value": 5.0}],
    )
    assert statuses(tr) == ["ok", "error", "ok"]
    assert "contiguous" in tr["steps"][1]["message"]
    after_err, after_fill = states(tr)[1:]
    assert after_err["w"]["value"] == W_FLAT
    assert after_fill["w"]["value"] == [5.0] * 4


@pytest.mark.parametrize(
    "method,reaches",
    [
        ("alias", True),
        ("clone", True),
        ("state_dict", True),  # Var handles: variable.rs `Var::set`
        ("detach", True),
        ("view_row", False),  # plain tensors: `slice_set(&v, 0, 0)`
        ("copy", False),
        ("save_load", False),
    ],
)
def test_reverse_whole_write(probe, method, reaches):
    shape = SNAPSHOT_EXPECT[method][3]
    value = list(range(100, 100 + int(np.prod(shape))))
    tr = probe.run([param("w", W)], [snap("s", "w", method), write("s", value)])
    assert statuses(tr) == ["ok", "ok"], tr["steps"]
    final = states(tr)[-1]
    assert final["s"]["value"] == [float(v) for v in value]
    if method == "view_row":  # the row view covers w[0] only
        assert final["w"]["value"] == [100.0, 101.0, 3.0, 4.0]
    else:
        assert final["w"]["value"] == ([float(v) for v in value] if reaches else W_FLAT)


# ---------------------------------------------------------------------------------------------
# Writes, fill, scale


def test_fill_scale_and_buffers(probe):
    tr = probe.run(
        [param("w", W), buffer("b", [1.0, 2.0, 3.0])],
        [
            {"op": "scale", "target": "w", "factor": 2.0},  # Var::set(&(w * 2))
            {"op": "scale", "target": "b", "factor": 2.0},  # no in-place multiply on a Tensor
            {"op": "fill", "target": "b", "value": -1.5},  # tensor.rs `const_set`
            snap("r", "w", "view_row"),
            {"op": "fill", "target": "r", "value": 0.0},  # const_set through the row view
            snap("d", "w", "detach"),
            {"op": "scale", "target": "d", "factor": 3.0},  # a detached Tensor is no Var
            write("b", [4, 5, 6]),  # slice_set(&whole, 0, 0)
            step("sgd", lr=1.0),
        ],
    )  # buffers are not in the VarMap
    assert statuses(tr) == ["ok", "unsupported", "ok", "ok", "ok", "ok", "unsupported", "ok", "ok"]
    assert "in-place multiply" in tr["steps"][1]["message"]
    st = states(tr)
    assert st[0]["w"]["value"] == [2.0, 4.0, 6.0, 8.0]
    assert st[2]["b"]["value"] == [-1.5] * 3
    assert st[4]["w"]["value"] == [0.0, 0.0, 6.0, 8.0]
    assert st[7]["b"]["value"] == [4.0, 5.0, 6.0]
    assert st[8]["w"]["value"] == [-1.0, -1.0, 5.0, 7.0]
    assert st[8]["b"]["value"] == [4.0, 5.0, 6.0]
    assert st[8]["b"]["requires_grad"] is False and st[8]["w"]["requires_grad"] is True
    assert st[8]["b"]["identity"] is not None


# ---------------------------------------------------------------------------------------------
# Optimizers


def test_sgd_exact(probe):
    w0 = np.array([1.0, 2.0, -3.0], dtype=np.float32)
    g = np.array([0.5, -1.0, 0.25], dtype=np.float32)
    lr = 0.1
    tr = probe.run([param("w", w0, grad=g)], [step("sgd", lr=lr), step("sgd", lr=lr)])
    assert statuses(tr) == ["ok", "ok"]
    # optim.rs `SGD::step`: var.set(&var.sub(&(grad * lr))) in f32; `grad * lr` is `affine(lr, 0)`
    want = w0.copy()
    for st in states(tr):
        want = want - (g * np.float32(lr) + np.float32(0.0))
        # f32 values travel in their shortest round-trip form: compare as f32, bit for bit
        np.testing.assert_array_equal(np.asarray(st["w"]["value"], dtype=np.float32), want)


def _adamw_ref(p, g, lr, b1, b2, eps, wd, steps):
    """optim.rs `AdamW::step`, in float64."""
    p = np.asarray(p, dtype=np.float64)
    g = np.asarray(g, dtype=np.float64)
    m = np.zeros_like(p)
    v = np.zeros_like(p)
    out = []
    for t in range(1, steps + 1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        m_hat = m / (1 - b1**t)
        v_hat = v / (1 - b2**t)
        p = p * (1 - lr * wd) - lr * (m_hat / (np.sqrt(v_hat) + eps))
        out.append(p.copy())
    return out


@pytest.mark.parametrize("kind,wd", [("adamw", 0.01), ("adamw", 0.0), ("adam", 0.0)])
def test_adam_family(probe, kind, wd):
    p0 = [1.0, -2.0, 3.0, 0.5]
    g = [0.5, -1.0, 2.0, 1e-3]
    lr, betas, eps = 0.1, (0.9, 0.999), 1e-8
    tr = probe.run([param("w", p0, grad=g)], [step(kind, lr=lr, betas=betas, eps=eps, weight_decay=wd)] * 3)
    assert statuses(tr) == ["ok"] * 3
    # first step by the brief's formula: p - lr*(m_hat/(sqrt(v_hat)+eps)) - lr*wd*p
    p, gg = np.array(p0), np.array(g)
    first = p - lr * (gg / (np.abs(gg) + eps)) - lr * wd * p
    got = [np.array(st["w"]["value"]) for st in states(tr)]
    np.testing.assert_allclose(got[0], first, atol=1e-5, rtol=0)
    for got_i, want_i in zip(got, _adamw_ref(p0, g, lr, *betas, eps, wd, 3)):
        np.testing.assert_allclose(got_i, want_i, atol=1e-5, rtol=0)


def test_unsupported_optimizers(probe):
    tr = probe.run([param("w", W)], [step("sgd_momentum", momentum=0.9), step("adam", weight_decay=0.01)])
    assert statuses(tr) == ["unsupported", "unsupported"]
    assert "momentum" in tr["steps"][0]["message"]
    assert "decoupled" in tr["steps"][1]["message"]
    assert states(tr)[-1]["w"]["value"] == W_FLAT


def test_optimizer_per_spec_and_lazy(probe):
    # Two specs -> two optimizers, both training the same Vars; lazy params are created at open
    # (candle has no lazy init) through VarMap::get with Init::Const (candle-nn init.rs).
    lazy = {"name": "z", "kind": "lazy", "shape": [2], "init": "const", "fill": 0.5}
    uni = {"name": "u", "kind": "lazy", "shape": [3], "init": "uniform", "seed": 7}
    tr = probe.run(
        [param("w", [1.0, 2.0]), lazy, uni], [step("sgd", lr=0.5), step("sgd", lr=0.25), step("sgd", lr=0.5)]
    )
    assert statuses(tr) == ["ok"] * 3
    init = tr["initial"]
    assert init["z"]["initialized"] and init["z"]["value"] == [0.5, 0.5] and init["z"]["requires_grad"]
    assert init["u"]["initialized"] and all(-1.0 <= x < 1.0 for x in init["u"]["value"])
    final = states(tr)[-1]
    assert final["w"]["value"] == [-0.25, 0.75]
    assert final["z"]["value"] == [-0.75, -0.75]
    np.testing.assert_allclose(final["u"]["value"], np.array(init["u"]["value"]) - 1.25, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# Move and module_clone


def test_move(probe):
    h = probe.hello()
    has_alt = h["devices"][0]["alt"] is not None
    tr = probe.run(
        [param("w", W)],
        [
            {"op": "move", "target": "w", "device": "home", "method": "to"},
            {"op": "scale", "target": "w", "factor": 2.0},
            step("sgd", lr=1.0),
            {"op": "move", "target": "w", "device": "alt", "method": "to"},
            {"op": "move", "target": "w", "device": "cpu", "method": "fork"},
            step("sgd", lr=1.0),
            snap("m", "w", "state_dict"),
        ],
    )
    st = states(tr)
    # tensor.rs `to_device`: same device -> `self.clone()`: the same tensor (same id, still a
    # variable) but the name now holds a Tensor, not a Var, so `scale` is unsupported.
    assert st[0]["w"]["identity"] == tr["initial"]["w"]["identity"]
    assert st[0]["w"]["requires_grad"] is True
    assert statuses(tr)[:3] == ["ok", "unsupported", "ok"]
    # the optimizer trains the VarMap's Var, which the rebound name still shares
    assert st[2]["w"]["value"] == [0.0, 1.0, 2.0, 3.0]
    assert tr["steps"][4]["status"] == "unsupported" and "fork" in tr["steps"][4]["message"]
    assert statuses(tr)[5:] == ["ok", "ok"]
    if has_alt:
        # a real copy on the other device: the optimizer keeps training the old Var
        assert tr["steps"][3]["status"] == "ok"
        assert st[3]["w"]["identity"] != tr["initial"]["w"]["identity"]
        assert st[5]["w"]["value"] == [0.0, 1.0, 2.0, 3.0]
        assert st[6]["m"]["value"] == [-1.0, 0.0, 1.0, 2.0]
    else:
        assert tr["steps"][3]["status"] == "unsupported"
        assert st[5]["w"]["value"] == [-1.0, 0.0, 1.0, 2.0]
        assert st[6]["m"]["identity"] == tr["initial"]["w"]["identity"]


def test_state_dict_and_save_load_need_a_param(probe):
    tr = probe.run(
        [param("w", W), buffer("b", [1.0])],
        [
            snap("s", "b", "state_dict"),
            snap("t", "b", "save_load"),
            snap("d", "w", "detach"),
            snap("e", "d", "state_dict"),
        ],
    )
    assert statuses(tr) == ["unsupported", "unsupported", "ok", "unsupported"]
    assert "VarMap" in tr["steps"][0]["message"]


def test_module_clone(probe):
    # the cloned `VarMap::data()` map: Var clones share storage and ids with the model's params
    tr = probe.run(
        [param("w", W), param("v", [1.0, 2.0]), buffer("b", [0.0])],
        [
            {"op": "module_clone", "name": "m"},
            step("sgd", lr=1.0),
            write("m.v", [5, 6]),
            {"op": "read", "target": "m.w"},
        ],
    )
    assert statuses(tr) == ["ok"] * 4
    st = states(tr)
    assert set(st[0]) == {"w", "v", "b", "m.w", "m.v"}
    assert st[0]["m.w"]["identity"] == st[0]["w"]["identity"]
    assert st[1]["m.w"]["value"] == [0.0, 1.0, 2.0, 3.0]
    assert st[2]["v"]["value"] == [5.0, 6.0]


def test_a_failed_load_sets_the_vars_a_hashmap_yields_before_the_failure(probe):
    # A candidate report (tests/cases/candle_failed_load_sets_a_subset_in_hashmap_order.toml).
    # candle-nn var_map.rs VarMap::set: `for (name, value) in iter { ... var.set(value)? }`, over
    # the kept map (a HashMap: each VarMap's has its own random hasher keys), stopping at the first
    # error. c0.p0 is the replaced p0's old Var, so setting p0 works (back to 1.0); c0.p1 is p1's
    # own storage, so setting p1 fails (Var::set: "cannot set a variable to a tensor that is
    # derived from its value"). Whether p0 came first changes from program to program: over 32
    # runs both outcomes show (the chance that one of two equally likely orders shows 32 times
    # running is 2**-31).
    tensors = [param("p0", [1.0]), param("p1", [2.0])]
    ops = [
        {"op": "save", "name": "c0", "to": "memory"},
        snap("s0", "p0", "mul1"),
        {"op": "replace", "target": "p0", "value": "s0", "how": "new"},
        {"op": "scale", "target": "p0", "factor": 0.0},
        {"op": "load", "from": "c0", "assign": False},
    ]
    restored = set()
    for _ in range(32):
        tr = probe.run(tensors, ops)
        assert statuses(tr) == ["ok"] * 4 + ["error"]
        assert "error setting p1" in tr["steps"][4]["message"]
        restored.add(states(tr)[4]["p0"]["value"][0])
    assert restored == {0.0, 1.0}


def test_module_modes_unsupported(probe):
    # valid/train only set the `train` argument of ModuleT::forward_t (candle has no module modes);
    # no_grad/freeze: candle has no requires-grad switch.
    tr = probe.run([param("w", W)], [{"op": o} for o in ("valid", "train", "no_grad", "freeze")])
    assert statuses(tr) == ["ok", "ok", "unsupported", "unsupported"]


# ---------------------------------------------------------------------------------------------
# Robustness: the probe answers everything and keeps serving.


def test_robustness(probe):
    for line in ["{not json", "[]", '{"type":"bogus"}', '{"type":"run","id":3}', "42"]:
        r = probe.send_raw(line)
        assert r["type"] == "error" and r["id"] is None, r
    tr = probe.run(
        [param("w", W)],
        [
            {"op": "frobnicate", "x": 1},  # unknown op
            {"op": "write", "target": "w", "index": 0},  # missing field
            {"op": "snapshot", "name": "s", "of": "w"},  # missing field
            snap("t", "w", "transpose"),
            write("t", [1, 2], index=0),  # slice_set: not contiguous
            write("w", [1, 2, 3], index=0),  # row of the wrong length
            write("w", [1, 2], index=5),  # row out of range
            write("w", [1, 2, 3]),  # Var::set shape mismatch
            snap("u", "nope", "clone"),  # unknown name
            {"op": "read", "target": "w"},
        ],
        valid_request=False,
    )
    assert statuses(tr) == [
        "unsupported",
        "error",
        "error",
        "ok",
        "error",
        "error",
        "error",
        "error",
        "skipped",
        "ok",
    ], tr["steps"]
    assert all(s.get("message") for s in tr["steps"] if s["status"] != "ok")
    assert all("\n" not in s.get("message", "") for s in tr["steps"])  # one-line candle errors
    assert states(tr)[-1]["w"]["value"] == W_FLAT
    # programs whose tensors cannot be created: a trace with status error
    bad = [
        probe.run([param("w", W)], [], device="tpu"),
        probe.request(
            {
                "type": "run",
                "id": 99,
                "device": "cpu",
                "program": {
                    "tensors": [{"name": "w", "kind": "param", "shape": [2, 2], "value": [1, 2, 3]}],
                    "ops": [],
                },
            }
        ),
        probe.run([param("w", W), param("w", W)], []),
    ]
    for t in bad:
        assert t["type"] == "trace" and t["status"] == "error" and t["message"], t
    assert probe.hello()["framework"] == "candle"
    assert states(probe.run([param("w", W)], [step()]))[-1]["w"]["value"] == [0.5, 1.5, 2.5, 3.5]


def test_exit_and_eof():
    p = Probe()
    p.hello()
    p.proc.stdin.write('{"type":"exit"}\n')
    p.proc.stdin.flush()
    assert p.proc.wait(timeout=10) == 0
    q = Probe()
    q.proc.stdin.close()
    assert q.proc.wait(timeout=10) == 0
