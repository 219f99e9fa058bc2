"""torch's version counters as the torch target observes them (``Observation.version``), and the
backward pass over a graph whose saved tensor a later write changed (``backward_of``).

What the PyTorch docs say, and these tests hold the target to: every in-place write bumps the
counter of the tensor it changes, which views and ``detach()`` share; ``t.data`` is a tensor over
``t``'s storage with a counter of its own (pytorch#30987, pytorch#6990); autograd refuses a
backward pass over a saved tensor whose counter moved since it was saved (the autograd mechanics
notes, "In-place correctness checks").
"""

from __future__ import annotations

import json

import pytest

from harness.case.ir import Program, TensorDecl, check_program
from harness.judging.oracle import compare
from harness.targets.driver import handle
from harness.targets.torch.session import TorchProbe
from harness.targets.trace import Trace
from tests.support.probe_client import named_observations, states

W = (TensorDecl("w", "param", (2,), (1.0, -2.0)),)
#: ``a = w.clamp(-1, 1)``: a graph that saved ``w``.
SAVES_W = [{"op": "snapshot", "name": "a", "of": "w", "method": "alias"}, {"op": "map", "target": "a", "fn": "clamp"}]


def _run(ops: list[dict], device: str = "cpu") -> dict:
    program = Program(W, check_program(W, ops))
    request = {"type": "run", "id": 1, "device": device, "program": program.to_wire()}
    return named_observations(handle(TorchProbe(), json.dumps(request).encode()))


def _through(method: str) -> list[dict]:
    """A graph that saved ``w``, then ``w`` written through a ``method`` snapshot of it, then a
    backward pass over the graph."""
    return [
        *SAVES_W,
        {"op": "snapshot", "name": "d", "of": "w", "method": method},
        {"op": "write", "target": "d", "value": [0.5, 0.5]},
        {"op": "backward_of", "of": "a"},
    ]


@pytest.mark.parametrize("device", ["cpu", "cpu+compile"])
def test_data_shares_storage_and_does_not_bump_the_sources_version(device):
    trace = _run(_through("data"), device)
    after_snapshot, after_write = states(trace)[2], states(trace)[3]
    w, d = after_snapshot["w"], after_snapshot["d"]
    assert d["storage"] == w["storage"]  # one memory
    assert after_write["w"]["value"] == [0.5, 0.5]  # the write through d reached w
    assert after_write["w"]["version"] == w["version"]  # and w's counter did not move
    assert after_write["d"]["version"] > d["version"]  # d's own counter did
    # so the backward pass over the graph that saved w runs, with w's new values
    assert [s["status"] for s in trace["steps"]] == ["ok"] * 5


def test_a_write_through_detach_bumps_the_sources_version():
    trace = _run(_through("detach"))
    before, after = states(trace)[2]["w"], states(trace)[3]["w"]
    assert after["value"] == [0.5, 0.5] and after["version"] > before["version"]


def test_a_backward_over_a_saved_tensor_changed_in_place_raises_in_eager_torch():
    trace = _run([*SAVES_W, {"op": "fill", "target": "w", "value": 0.5}, {"op": "backward_of", "of": "a"}])
    statuses = [s["status"] for s in trace["steps"]]
    assert statuses == ["ok", "ok", "ok", "error"]
    assert "modified by an inplace operation" in trace["steps"][3]["message"]
    # without the write, the same pass runs
    assert _run([*SAVES_W, {"op": "backward_of", "of": "a"}])["steps"][2]["status"] == "ok"


def test_a_retained_graph_takes_a_second_backward_pass():
    trace = _run([*SAVES_W, {"op": "backward_of", "of": "a"}, {"op": "backward_of", "of": "a"}])
    assert [s["status"] for s in trace["steps"]] == ["ok"] * 4


def test_the_oracle_names_the_data_write_as_hidden_from_autograd():
    program = Program(W, check_program(W, _through("data")))
    request = {"type": "run", "id": 1, "device": "cpu", "program": program.to_wire()}
    trace = Trace.from_wire("torch:cpu", handle(TorchProbe(), json.dumps(request).encode()))
    (f,) = compare(program, {"torch:cpu": trace})
    assert (f.kind, f.method, f.op_label, f.subject, f.sides) == (
        "version",
        "data",
        "write:whole",
        "w",
        ("changed", "kept"),
    )
    # through detach, which shares the counter, there is nothing hidden
    program = Program(W, check_program(W, _through("detach")))
    request = {"type": "run", "id": 1, "device": "cpu", "program": program.to_wire()}
    trace = Trace.from_wire("torch:cpu", handle(TorchProbe(), json.dumps(request).encode()))
    assert compare(program, {"torch:cpu": trace}) == []
