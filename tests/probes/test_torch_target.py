"""Tests of the PyTorch target (``python -m harness.targets.torch``: the Python driver
``harness/targets/driver.py`` serving the torch session ``harness/targets/torch/session.py``), run
as a real subprocess.

Every reply is validated against ``rust_probes/protocol/schema/protocol.schema.json`` (and every
request the tests send, so the tests speak the protocol the harness speaks). Expected behaviour is
derived from PyTorch's documentation or source, cited at each expectation, never from the target.

The tests of this subject that run in-process are in tests/unit/targets/test_torch_target.py.
"""

from __future__ import annotations

import json
import math
import os
import selectors
import signal
import subprocess
import sys
import time

import jsonschema
import pytest

from harness.targets.protocol import PROTOCOL_VERSION
from tests.conftest import ROOT
from tests.support.probe_client import named_observations
from tests.support.torch_target import FOLLOWS, KEEPS, SCHEMA, param

PYTHON = ROOT / ".venv" / "bin" / "python"
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
REPLY_TIMEOUT = 120.0  # seconds; the first program pays for torch.optim's lazy imports


def validate(msg: dict) -> None:
    VALIDATOR.validate(msg)


class Worker:
    def __init__(self, env: dict | None = None):
        full_env = dict(os.environ)
        full_env.pop("ALIASFUZZ_TORCH_FAULT", None)
        full_env.update(env or {})
        python = str(PYTHON) if PYTHON.exists() else sys.executable
        self.proc = subprocess.Popen(
            [python, "-m", "harness.targets.torch"],
            cwd=ROOT,
            env=full_env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.proc.stdout, selectors.EVENT_READ)
        self.next_id = 0
        self.buf = b""

    def send_raw(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, msg: dict, check: bool = True) -> None:
        if check:
            validate(msg)
        self.send_raw((json.dumps(msg) + "\n").encode())

    def recv(self, timeout: float = REPLY_TIMEOUT) -> dict | None:
        """The next reply, or None when nothing came within `timeout` or stdout closed.

        Reads the pipe with os.read into our own buffer: a buffered readline would pull several
        pipelined replies into Python's buffer, where select() no longer sees them."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not self.sel.select(left):
                return None
            chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        msg = json.loads(line)
        validate(msg)
        return named_observations(msg)

    def hello(self) -> dict:
        self.send({"type": "hello", "protocol": PROTOCOL_VERSION})
        return self.recv()

    def run(self, tensors, ops, device="cpu", check=True) -> dict:
        self.next_id += 1
        self.send(
            {"type": "run", "id": self.next_id, "device": device, "program": {"tensors": tensors, "ops": ops}},
            check=check,
        )
        trace = self.recv()
        assert trace is not None, self.stderr_tail()
        assert trace["type"] == "trace" and trace["id"] == self.next_id, trace
        assert trace["device"] == device
        return trace

    def stderr_tail(self) -> str:
        return "(stderr is read after exit)"

    def close(self) -> int:
        if self.proc.poll() is None:
            try:
                self.send({"type": "exit"})
            except BrokenPipeError:
                pass
        try:
            return self.proc.wait(timeout=30)
        finally:
            for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
                f.close()


@pytest.fixture(scope="module")
def worker():
    w = Worker()
    yield w
    assert w.close() == 0


# ---------------------------------------------------------------------------------------------
# Program helpers: ops with every field present (the harness fills defaults).


def buffer(name, shape, value):
    return {"name": name, "kind": "buffer", "shape": shape, "value": value}


def snap(name, of, method):
    return {"op": "snapshot", "name": name, "of": of, "method": method}


def write(target, value, index=None):
    return {"op": "write", "target": target, "index": index, "value": value}


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


def move(target, device="cpu", method="to"):
    return {"op": "move", "target": target, "device": device, "method": method}


def states(trace) -> list[dict]:
    """Full state after each op: `initial` updated by `changed` of steps 0..=i (PROTOCOL.md)."""
    assert trace["status"] == "ok", trace
    state = dict(trace["initial"])
    out = []
    for s in trace["steps"]:
        state = {**state, **s["changed"]}
        out.append(state)
    return out


def final(trace) -> dict:
    return states(trace)[-1]


def statuses(trace) -> list[str]:
    return [s["status"] for s in trace["steps"]]


def approx(xs, rel=1e-6, abs=1e-6):
    return pytest.approx(xs, rel=rel, abs=abs)


# ---------------------------------------------------------------------------------------------
# Handshake.


def test_hello(worker):
    import torch

    h = worker.hello()
    assert h["type"] == "hello" and h["protocol"] == PROTOCOL_VERSION and h["framework"] == "torch"
    assert h["versions"]["torch"] == torch.__version__
    assert set(h["versions"]) == {"torch", "python", "numpy"}
    devices = {d["name"]: d for d in h["devices"]}
    assert devices["cpu"]["kind"] == "cpu" and "cpu+foreach" in devices
    if not torch.cuda.is_available() and not torch.backends.mps.is_available():
        assert devices["cpu"]["alt"] is None and set(devices) == {
            "cpu",
            "cpu+foreach",
            "cpu+compile",
            "cpu+inductor",
            "cpu+graph",
        }
    if torch.cuda.is_available():
        assert devices["cpu"]["alt"] == "cuda" and devices["cuda"]["alt"] == "cpu"
        assert {"cuda+foreach", "cuda+fused", "cuda+compile", "cuda+inductor"} <= set(devices)
    # a variant declares the ops where its code differs (an optimizer variant the steps, the
    # compiled variants the ops that compute tensors, the graph variant the ops the table fuses);
    # a plain device declares nothing
    compiled = ["snapshot", "write", "assign", "fill", "scale", "append", "map", "add", "forward"]
    fused = ["snapshot", "write", "fill", "scale", "assign", "append", "map", "add"]
    for name, d in devices.items():
        want = None if "+" not in name else compiled if name.endswith(("+compile", "+inductor")) else ["step"]
        want = fused if name.endswith("+graph") else want
        assert d.get("differs_on") == want, name
        # Inductor's variant is a target only where it is named (its compiles cost seconds)
        assert d.get("on_request", False) == name.endswith("+inductor"), name
        # ... and its programs may take longer than the harness's 20 s (its first compile)
        assert d.get("program_timeout_s", 0) >= (60 if name.endswith("+inductor") else 0), name
        assert ("program_timeout_s" in d) == name.endswith("+inductor"), name
    ops = SCHEMA["$defs"]["op_name"]["enum"]
    assert sorted(h["ops"]) == sorted(ops)
    assert sorted(h["methods"]) == sorted(SCHEMA["$defs"]["method"]["enum"])


def test_hello_with_another_protocol_number_answers_its_own(worker):
    worker.send({"type": "hello", "protocol": 99})
    assert worker.recv()["protocol"] == PROTOCOL_VERSION


# ---------------------------------------------------------------------------------------------
# The example of the spec.


def test_spec_example(worker):
    trace = worker.run(
        [param("w", [1, 2], [1, 2]), buffer("buf", [2, 2], [0, 0, 0, 0])],
        [snap("s1", "w", "clone"), step("sgd", lr=0.5), snap("b1", "buf", "clone"), write("buf", [7, 7], index=0)],
    )
    assert statuses(trace) == ["ok"] * 4
    st = final(trace)
    assert st["w"]["value"] == [0.5, 1.5]
    assert st["s1"]["value"] == [1.0, 2.0]
    assert st["b1"]["value"] == [0.0, 0.0, 0.0, 0.0]
    assert st["buf"]["value"] == [7.0, 7.0, 0.0, 0.0]
    # delta encoding: the step changed only w, the write only buf
    assert set(trace["steps"][1]["changed"]) == {"w"}
    assert set(trace["steps"][3]["changed"]) == {"buf"}
    assert st["w"]["requires_grad"] is True and st["buf"]["requires_grad"] is False
    assert st["w"]["device"] == "cpu" and st["w"]["initialized"] is True


# ---------------------------------------------------------------------------------------------
# Snapshot methods across an in-place update of the param.
#
# "follows" = the snapshot shares memory with the param, so the in-place SGD update
# (torch/optim/sgd.py `_single_tensor_sgd`: `param.add_(grad, alpha=-lr)`) and the in-place row
# write are visible through it; "keeps" = it owns its memory.
# Methods that return the very same object (identity token equal to the param's).
SAME_OBJECT = {"alias", "to_home", "to_cpu", "contiguous", "to_same_dtype", "via_f32"}

W0 = [[1.0, 2.0], [3.0, 4.0]]


def layout(method: str, m: list[list[float]]) -> list[float]:
    """The row-major value a snapshot taken with `method` shows of the 2x2 matrix `m`."""
    if method == "view_row":
        return list(m[0])
    if method == "transpose":
        return [m[0][0], m[1][0], m[0][1], m[1][1]]
    return [x for row in m for x in row]


def expected_shape(method: str) -> list[int]:
    return {"view_row": [1, 2], "reshape": [4]}.get(method, [2, 2])


@pytest.mark.parametrize("device", ["cpu", "cpu+compile", "cpu+graph"])
@pytest.mark.parametrize("method", sorted(set(FOLLOWS) | set(KEEPS)))
def test_snapshot_across_sgd_step(worker, method, device):
    trace = worker.run([param("w", [2, 2], [1, 2, 3, 4])], [snap("s", "w", method), step("sgd", lr=0.5)], device=device)
    assert statuses(trace) == ["ok", "ok"], trace["steps"]
    after_snap, after_step = states(trace)
    w1 = [[0.5, 1.5], [2.5, 3.5]]  # grad = ones
    assert after_step["w"]["value"] == [0.5, 1.5, 2.5, 3.5]
    s = after_step["s"]
    assert s["shape"] == expected_shape(method)
    assert after_snap["s"]["value"] == layout(method, W0)
    want = layout(method, w1) if method in FOLLOWS else layout(method, W0)
    assert s["value"] == want, f"{method}: {FOLLOWS.get(method) or KEEPS.get(method)}"
    same = s["identity"] == after_step["w"]["identity"]
    assert same == (method in SAME_OBJECT), method


@pytest.mark.parametrize("device", ["cpu", "cpu+compile", "cpu+graph"])
@pytest.mark.parametrize("method", sorted(set(FOLLOWS) | set(KEEPS)))
def test_snapshot_across_row_write(worker, method, device):
    trace = worker.run(
        [param("w", [2, 2], [1, 2, 3, 4])], [snap("s", "w", method), write("w", [7, 8], index=0)], device=device
    )
    assert statuses(trace) == ["ok", "ok"], trace["steps"]
    st = final(trace)
    w1 = [[7.0, 8.0], [3.0, 4.0]]
    assert st["w"]["value"] == [7.0, 8.0, 3.0, 4.0]
    want = layout(method, w1) if method in FOLLOWS else layout(method, W0)
    assert st["s"]["value"] == want, method


@pytest.mark.parametrize("device", ["cpu", "cpu+compile", "cpu+graph"])
@pytest.mark.parametrize("method", sorted(set(FOLLOWS) | set(KEEPS)))
def test_reverse_fill_through_snapshot(worker, method, device):
    """A write into a snapshot reaches the param exactly when they share memory, in eager torch
    and with the snapshot and the fill each compiled (``cpu+compile``) or both in one compiled
    function (``cpu+graph``): compiled code must keep eager's aliasing, a write through a view
    included."""
    trace = worker.run(
        [param("w", [2, 2], [1, 2, 3, 4])],
        [snap("s", "w", method), {"op": "fill", "target": "s", "value": 9.0}],
        device=device,
    )
    assert statuses(trace) == ["ok", "ok"], trace["steps"]
    st = final(trace)
    if method not in FOLLOWS:
        want = [1.0, 2.0, 3.0, 4.0]
    elif method == "view_row":
        want = [9.0, 9.0, 3.0, 4.0]  # narrow(0, 0, 1) covers row 0 only
    else:
        want = [9.0] * 4
    assert st["w"]["value"] == want, method


@pytest.mark.parametrize("method", ["view_row", "narrow"])
def test_a_write_through_a_host_round_trip_of_a_row_shows_in_the_param_at_once(worker, method):
    """``torch.from_numpy`` of a row's ``numpy()`` is a tensor with its own version counter and an
    untyped storage that starts at the row (``narrow``: rows 1.., inside the param's storage, not
    at its start). A fill through it changes the param at that op, so the trace must say so
    there, not at the next op that happens to change the param's own change key."""
    trace = worker.run(
        [param("w", [2, 2], [1, 2, 3, 4])],
        [
            snap("r", "w", method),
            snap("h", "r", "to_host"),
            {"op": "fill", "target": "h", "value": 9.0},
            {"op": "read", "target": "w"},
        ],
    )
    assert statuses(trace) == ["ok"] * 4, trace["steps"]
    want = [9.0, 9.0, 3.0, 4.0] if method == "view_row" else [1.0, 2.0, 9.0, 9.0]
    assert "w" in trace["steps"][2]["changed"], trace["steps"][2]
    assert states(trace)[2]["w"]["value"] == want
    assert states(trace)[2]["r"]["value"] == [9.0, 9.0]


def test_reverse_write_into_detach_changes_param(worker):
    # Tensor.detach docs: in-place modifications on either of them will be seen.
    trace = worker.run(
        [param("w", [2, 2], [1, 2, 3, 4])],
        [
            snap("d", "w", "detach"),
            write("d", [5, 6], index=1),
            write("d", [0, 0, 0, 0]),
            {"op": "scale", "target": "d", "factor": 2.0},
        ],
    )
    assert statuses(trace) == ["ok"] * 4
    s = states(trace)
    assert s[1]["w"]["value"] == [1.0, 2.0, 5.0, 6.0]
    assert s[2]["w"]["value"] == [0.0, 0.0, 0.0, 0.0]
    assert s[1]["d"]["requires_grad"] is False and s[1]["w"]["requires_grad"] is True
    assert s[1]["w"]["identity"] != s[1]["d"]["identity"]


def test_write_into_buffer_alias_and_rank1_row(worker):
    trace = worker.run(
        [buffer("b", [3], [1, 2, 3])],
        [snap("a", "b", "alias"), write("a", [9], index=2), {"op": "scale", "target": "b", "factor": -1.0}],
    )
    assert statuses(trace) == ["ok"] * 3
    st = final(trace)
    assert st["b"]["value"] == [-1.0, -2.0, -9.0] == st["a"]["value"]
    assert st["a"]["identity"] == st["b"]["identity"]


def test_state_dict_of_a_snapshot_is_unsupported_and_deepcopy_of_non_leaf_errors(worker):
    trace = worker.run(
        [param("w", [2, 2], [1, 2, 3, 4])],
        [snap("c", "w", "clone"), snap("sd", "c", "state_dict"), snap("dc", "c", "deepcopy"), snap("x", "sd", "clone")],
    )
    st = statuses(trace)
    assert st[:2] == ["ok", "unsupported"]
    # torch/_tensor.py __deepcopy__: "Only Tensors created explicitly by the user (graph leaves)
    # support the deepcopy protocol at the moment" -> RuntimeError
    assert st[2] == "error" and trace["steps"][2]["message"].startswith("RuntimeError: Only Tensors")
    assert st[3] == "skipped" and "sd" in trace["steps"][3]["message"]
    assert "sd" not in final(trace) and "dc" not in final(trace)


# ---------------------------------------------------------------------------------------------
# Optimizers: first (and second) step values computed by hand from the algorithms in the
# torch.optim docs (SGD, Adam, AdamW pages).

P = [1.0, -2.0, 3.0, 0.5]
G = [0.5, -1.0, 2.0, 0.25]


def run_opt(worker, ops, device="cpu", grad=G):
    trace = worker.run([param("w", [2, 2], P, grad=grad)], ops, device=device)
    assert set(statuses(trace)) == {"ok"}, trace["steps"]
    return [s["w"]["value"] for s in states(trace)]


@pytest.mark.parametrize("device", ["cpu", "cpu+foreach"])
def test_sgd_values(worker, device):
    lr = 0.1
    (v1,) = run_opt(worker, [step("sgd", lr=lr)], device)
    assert v1 == approx([p - lr * g for p, g in zip(P, G)])


@pytest.mark.parametrize("device", ["cpu", "cpu+foreach"])
def test_sgd_momentum_values_and_state_persists(worker, device):
    # SGD docs: t = 1: b = g; t > 1: b = mu * b + (1 - dampening) * g; p = p - lr * b.
    lr, mu = 0.1, 0.9
    v1, v2 = run_opt(worker, [step("sgd_momentum", lr=lr, momentum=mu)] * 2, device)
    p1 = [p - lr * g for p, g in zip(P, G)]
    p2 = [p - lr * (mu * g + g) for p, g in zip(p1, G)]
    assert v1 == approx(p1) and v2 == approx(p2)


@pytest.mark.parametrize("device", ["cpu", "cpu+foreach"])
def test_adam_values(worker, device):
    # Adam docs, t = 1: g <- g + wd * p; m = (1-b1) g, v = (1-b2) g^2; m_hat = g, v_hat = g^2;
    # p <- p - lr * m_hat / (sqrt(v_hat) + eps) = p - lr * g / (|g| + eps).
    lr, eps, wd = 0.01, 1e-8, 0.1
    (v1,) = run_opt(worker, [step("adam", lr=lr, eps=eps)], device)
    assert v1 == approx([p - lr * g / (abs(g) + eps) for p, g in zip(P, G)], rel=1e-5)
    (v1,) = run_opt(worker, [step("adam", lr=lr, eps=eps, weight_decay=wd)], device)
    gs = [g + wd * p for p, g in zip(P, G)]  # L2 penalty folded into the gradient
    assert v1 == approx([p - lr * g / (abs(g) + eps) for p, g in zip(P, gs)], rel=1e-5)


@pytest.mark.parametrize("device", ["cpu", "cpu+foreach"])
def test_adamw_values(worker, device):
    # AdamW docs, t = 1: p <- p - lr * wd * p (decoupled), then p - lr * g / (|g| + eps).
    lr, eps, wd = 0.01, 1e-8, 0.1
    (v1,) = run_opt(worker, [step("adamw", lr=lr, eps=eps, weight_decay=wd)], device)
    want = [p * (1 - lr * wd) - lr * g / (abs(g) + eps) for p, g in zip(P, G)]
    assert v1 == approx(want, rel=1e-5)


def test_distinct_specs_make_distinct_optimizers(worker):
    # Two momentum SGDs with different lr: each has its own momentum buffer (first step: b = g).
    v1, v2 = run_opt(worker, [step("sgd_momentum", lr=0.1, momentum=0.9), step("sgd_momentum", lr=0.2, momentum=0.9)])
    p1 = [p - 0.1 * g for p, g in zip(P, G)]
    assert v2 == approx([p - 0.2 * g for p, g in zip(p1, G)])


def test_foreach_equals_plain(worker):
    ops = [
        step("sgd_momentum", lr=0.05, momentum=0.8),
        step("adam", lr=0.01),
        step("adamw", lr=0.02, weight_decay=0.05),
        step("sgd_momentum", lr=0.05, momentum=0.8),
        step("adam", lr=0.01),
    ]
    plain = run_opt(worker, ops, "cpu")
    foreach = run_opt(worker, ops, "cpu+foreach")
    for a, b in zip(plain, foreach):
        assert a == approx(b, rel=1e-6, abs=1e-7)


def test_step_trains_params_and_lazy_not_buffers(worker):
    trace = worker.run(
        [
            param("w", [2], [1, 2], grad=[2, 4]),
            buffer("b", [2], [1, 2]),
            {"name": "l", "kind": "lazy", "shape": [2], "init": "const", "fill": 3.0},
        ],
        [step("sgd", lr=0.5)],
    )
    st = final(trace)
    assert st["w"]["value"] == [0.0, 0.0]
    assert st["b"]["value"] == [1.0, 2.0]
    assert st["l"]["value"] == [2.5, 2.5]
    assert set(trace["steps"][0]["changed"]) == {"w", "l"}


def test_lazy_tensors_created_at_open(worker):
    import torch

    trace = worker.run(
        [
            {"name": "u", "kind": "lazy", "shape": [2, 3], "init": "uniform", "seed": 42},
            {"name": "c", "kind": "lazy", "shape": [2], "init": "const", "fill": -1.5},
        ],
        [{"op": "read", "target": "u"}],
    )
    init = trace["initial"]
    assert init["u"]["initialized"] is True and init["u"]["requires_grad"] is True
    want = torch.empty(2, 3).uniform_(-1, 1, generator=torch.Generator().manual_seed(42))
    assert init["u"]["value"] == approx(want.reshape(-1).tolist(), rel=1e-7)
    assert all(-1 <= x < 1 for x in init["u"]["value"])
    assert init["c"]["value"] == [-1.5, -1.5]
    assert trace["steps"][0] == {"status": "ok", "changed": {}}


# ---------------------------------------------------------------------------------------------
# move, module_clone, mode changes.


def test_move_to_cpu_keeps_identity_and_grad(worker):
    # nn.Module._apply (torch/nn/modules/module.py): `param.data = param_applied` keeps the
    # Parameter object; Tensor.to returns self on the same device.
    trace = worker.run(
        [param("w", [2], [1, 2])],
        [
            step("sgd", lr=0.5),
            move("w", "cpu"),
            move("w", "home"),
            step("sgd", lr=0.5),
            move("w", "alt"),
            move("w", "cpu", "fork"),
        ],
    )
    st = statuses(trace)
    assert st[:4] == ["ok"] * 4
    assert st[4] == "unsupported"  # no second device on a CPU-only machine
    assert st[5] == "unsupported" and "burn" in trace["steps"][5]["message"]
    s = states(trace)
    assert s[1]["w"]["identity"] == trace["initial"]["w"]["identity"]
    assert trace["steps"][1]["changed"] == {} and trace["steps"][2]["changed"] == {}
    # the optimizer still holds the same object: the second step trains it
    assert s[3]["w"]["value"] == [0.0, 1.0]


def test_move_of_snapshot_and_buffer(worker):
    trace = worker.run(
        [param("w", [2], [1, 2]), buffer("b", [2], [3, 4])],
        [snap("c", "w", "clone"), move("c", "cpu"), move("b", "home")],
    )
    assert statuses(trace) == ["ok"] * 3
    st = final(trace)
    assert st["b"]["value"] == [3.0, 4.0] and st["c"]["value"] == [1.0, 2.0]


def test_module_clone_is_independent(worker):
    trace = worker.run(
        [param("w", [2], [1, 2]), buffer("b", [1], [0]), param("v", [1], [5])],
        [{"op": "module_clone", "name": "m"}, step("sgd", lr=1.0), write("m.w", [9, 9]), snap("mw", "m.w", "alias")],
    )
    assert statuses(trace) == ["ok"] * 4
    s = states(trace)
    # copy.deepcopy(module) clones every parameter (Tensor.__deepcopy__)
    assert set(s[0]) == {"w", "b", "v", "m.w", "m.v"}
    assert s[0]["m.w"]["identity"] != s[0]["w"]["identity"]
    assert s[0]["m.w"]["requires_grad"] is True
    assert s[1]["w"]["value"] == [0.0, 1.0] and s[1]["m.w"]["value"] == [1.0, 2.0]
    assert s[2]["w"]["value"] == [0.0, 1.0] and s[2]["m.w"]["value"] == [9.0, 9.0]
    assert s[3]["mw"]["identity"] == s[3]["m.w"]["identity"]


def test_modes_and_freeze(worker):
    trace = worker.run(
        [param("w", [2], [1, 2]), buffer("b", [1], [0])],
        [
            {"op": "valid"},
            {"op": "train"},
            {"op": "no_grad"},
            step("sgd"),
            {"op": "freeze"},
            {"op": "read", "target": "w"},
        ],
    )
    st = statuses(trace)
    assert st[:3] == ["ok"] * 3 and st[4:] == ["ok", "ok"]
    assert trace["steps"][0]["changed"] == {} and trace["steps"][1]["changed"] == {}
    assert trace["steps"][2]["changed"]["w"]["requires_grad"] is False
    # every param frozen: the loss does not require grad, backward raises (torch.autograd)
    assert st[3] == "error" and trace["steps"][3]["message"].startswith("RuntimeError")
    assert final(trace)["w"]["value"] == [1.0, 2.0]


# ---------------------------------------------------------------------------------------------
# Robustness: the same answers as the Rust driver (rust_probes/protocol/src/lib.rs).


def test_bad_ops_are_answered_and_the_program_goes_on(worker):
    ops = [
        {"op": "teleport", "target": "w"},  # unknown op
        {"op": "write", "target": "w", "index": 0},  # missing field
        {"op": "read", "target": "w", "extra": 1},  # unknown field
        {"target": "w"},  # no op field
        {"op": "fill", "target": "nope", "value": 1.0},  # unbound name
        write("w", [1, 2], index=5),  # torch raises (IndexError)
        write("w", [1, 2, 3]),  # torch raises (shape)
        {"op": "fill", "target": "w", "value": 4.0},  # still served
    ]
    trace = worker.run([param("w", [2, 2], [1, 2, 3, 4])], ops, check=False)
    st = statuses(trace)
    assert st == ["unsupported", "error", "error", "error", "skipped", "error", "error", "ok"]
    msgs = [s.get("message") for s in trace["steps"]]
    assert msgs[0] == 'unknown op "teleport"'
    assert msgs[1] == "malformed op: missing field `value`"
    assert "unknown field `extra`" in msgs[2]
    assert msgs[3] == "malformed op: no string field `op`"
    assert msgs[4] == "no tensor named nope"
    assert msgs[5].startswith("IndexError: ")
    assert msgs[6].startswith("RuntimeError: ")
    assert final(trace)["w"]["value"] == [4.0] * 4


def test_unknown_device_is_a_trace_error(worker):
    trace = worker.run([param("w", [1], [1])], [{"op": "read", "target": "w"}], device="tpu")
    assert trace["status"] == "error" and "unknown device" in trace["message"]
    assert trace["initial"] == {} and trace["steps"] == []


def test_non_finite_values_travel_as_strings(worker):
    # 2 * 3e38 overflows float32 (max ~3.4e38) to +-inf; 0 * 3e38 stays 0 (IEEE 754).
    trace = worker.run([param("w", [3], [2, 0, -2])], [{"op": "scale", "target": "w", "factor": 3e38}])
    assert trace["steps"][0]["changed"]["w"]["value"] == ["Infinity", 0.0, "-Infinity"]
    # ... and non-finite values are read from the strings in requests too (de_f32s)
    trace = worker.run(
        [param("w", [3], ["Infinity", "NaN", "-Infinity"])], [{"op": "read", "target": "w"}, write("w", [1, "NaN", 3])]
    )
    assert trace["initial"]["w"]["value"] == ["Infinity", "NaN", "-Infinity"]
    # Obs: PartialEq in the Rust driver compares values by bit pattern: reading a NaN-holding
    # tensor changes nothing, so it is not reported as changed
    assert "w" not in trace["steps"][0]["changed"]
    assert trace["steps"][1]["changed"]["w"]["value"] == [1.0, "NaN", 3.0]


def test_changed_compares_values_by_bit_pattern(worker):
    # -0.0 == 0.0 as floats but not as float32 bits: writing -0 over 0 is a change (as in the
    # Rust Obs: PartialEq); writing the same bits again changes only the version counter, which
    # every in-place write bumps
    trace = worker.run([param("w", [2], [0, 1])], [write("w", [-0.0, 1]), write("w", [-0.0, 1])])
    assert trace["steps"][0]["changed"]["w"]["value"] == [-0.0, 1.0]
    assert math.copysign(1, trace["steps"][0]["changed"]["w"]["value"][0]) == -1
    again = trace["steps"][1]["changed"]["w"]
    assert again["value"] == [-0.0, 1.0] and again["version"] == trace["steps"][0]["changed"]["w"]["version"] + 1
    # a read bumps nothing: no change at all
    assert worker.run([param("w", [2], [0, 1])], [{"op": "read", "target": "w"}])["steps"][0]["changed"] == {}


def test_float32_values_use_the_shortest_f32_digits(worker):
    trace = worker.run([param("w", [2], [0.1, 1e-3])], [])
    assert trace["initial"]["w"]["value"] == [0.1, 0.001]
    # the worker caches each value's digits: a repeated value, either zero and NaN come out the
    # same the second time, in one tensor and across programs
    values = [0.1, 0.0, -0.0, 0.1, "NaN", -0.0, 0.0, 1e-3, 3.0000001]
    for _ in range(2):
        got = worker.run([param("w", [len(values)], values)], [])["initial"]["w"]["value"]
        assert got[:4] == [0.1, 0.0, -0.0, 0.1] and got[5:] == [-0.0, 0.0, 0.001, 3.0]
        assert [math.copysign(1, x) for x in (got[1], got[2], got[5], got[6])] == [1, -1, -1, 1]
        assert got[4] == "NaN"


def test_malformed_lines_get_error_replies(worker):
    for bad in (
        b"not json\n",
        b'{"type": "run"}\n',
        b"[1, 2]\n",
        b'{"type": "bogus"}\n',
        b"\xff\xfe\n",
        b'{"type": "run", "id": -1, "device": "cpu", "program": {"tensors": [], "ops": []}}\n',
    ):
        worker.send_raw(bad)
        reply = worker.recv()
        assert reply["type"] == "error" and reply["id"] is None, bad
        assert reply["message"].startswith("malformed request")
    worker.send_raw(b"\n   \n")  # blank lines are skipped, not answered
    assert worker.hello()["type"] == "hello"


def test_pipelined_requests_are_answered_in_order(worker):
    prog = {"tensors": [param("w", [1], [1])], "ops": [step("sgd", lr=0.5)]}
    for i in (101, 102, 103):
        worker.send({"type": "run", "id": i, "device": "cpu", "program": prog})
    assert [worker.recv()["id"] for _ in range(3)] == [101, 102, 103]


def test_eof_exits_zero():
    w = Worker()
    assert w.hello()["framework"] == "torch"
    w.proc.stdin.close()
    assert w.proc.wait(timeout=30) == 0
    w.proc.stdout.close()
    w.proc.stderr.close()


# ---------------------------------------------------------------------------------------------
# Fault injection.

FAULT_PROGRAM = {"tensors": [param("w", [1], [1])], "ops": [{"op": "_fault"}]}


def test_fault_op_is_unknown_without_the_variable(worker):
    trace = worker.run(FAULT_PROGRAM["tensors"], FAULT_PROGRAM["ops"])
    assert trace["steps"][0]["status"] == "unsupported"


def test_fault_segfault_kills_the_worker():
    w = Worker({"ALIASFUZZ_TORCH_FAULT": "segfault"})
    try:
        assert w.hello()["type"] == "hello"
        w.send({"type": "run", "id": 1, "device": "cpu", "program": FAULT_PROGRAM})
        assert w.proc.wait(timeout=60) == -signal.SIGSEGV
        assert w.recv(timeout=1) is None  # no reply for the killed program
    finally:
        if w.proc.poll() is None:
            w.proc.kill()
        w.proc.wait()


def test_fault_hang_blocks_the_worker():
    w = Worker({"ALIASFUZZ_TORCH_FAULT": "hang"})
    try:
        assert w.hello()["type"] == "hello"
        w.send({"type": "run", "id": 1, "device": "cpu", "program": FAULT_PROGRAM})
        assert w.recv(timeout=3) is None
        assert w.proc.poll() is None
    finally:
        w.proc.kill()
        w.proc.wait()


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.skipif(not _cuda(), reason="needs CUDA")
def test_cuda_devices(worker):
    # On an accelerator the numpy round trip copies (Tensor.cpu / Tensor.to copy across devices),
    # so to_host keeps; module.to("cpu") keeps the Parameter object (Module._apply set_data path).
    trace = worker.run(
        [param("w", [2, 2], [1, 2, 3, 4])],
        [
            snap("h", "w", "to_host"),
            snap("c", "w", "to_cpu"),
            step("sgd", lr=0.5),
            move("w", "alt"),
            step("sgd", lr=0.5),
        ],
        device="cuda",
    )
    assert statuses(trace) == ["ok"] * 5, trace["steps"]
    s = states(trace)
    assert trace["initial"]["w"]["device"] == "cuda:0"
    assert s[2]["h"]["value"] == [1.0, 2.0, 3.0, 4.0] == s[2]["c"]["value"]
    assert s[3]["w"]["device"] == "cpu"
    assert s[3]["w"]["identity"] == trace["initial"]["w"]["identity"]
    assert s[4]["w"]["value"] == [0.0, 1.0, 2.0, 3.0]
    ops = [step("adam", lr=0.01), step("adamw", lr=0.02, weight_decay=0.05), step("sgd", lr=0.1)]
    plain = run_opt(worker, ops, "cuda")
    for variant in ("cuda+foreach", "cuda+fused"):
        for a, b in zip(plain, run_opt(worker, ops, variant)):
            assert a == approx(b, rel=1e-5, abs=1e-6), variant
