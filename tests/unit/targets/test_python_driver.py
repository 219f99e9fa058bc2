"""Tests of the Python driver (``harness/targets/driver.py``, ``harness/targets/protocol.py``) in
process, on a stand-in probe: a TEST DOUBLE session of plain lists, so that what the driver does
(parsing from the op table, statuses, messages, the delta encoding, float encoding) is seen apart
from torch, and so that what a Python framework implements is shown to be only a probe and a
session. The torch target itself is tested as a subprocess in ``tests/probes/test_torch_target.py``.

Every reply is validated against ``rust_probes/protocol/schema/protocol.schema.json``.
"""

from __future__ import annotations

import io
import json
import math
import sys

import jsonschema
import pytest

from harness.case import ops as op_table
from harness.paths import SCHEMA
from harness.targets import driver
from harness.targets.driver import Unsupported
from harness.targets.protocol import PROTOCOL_VERSION, Malformed, observation, parse_op
from tests.support.probe_client import named_observations

VALIDATOR = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))


def snap(name, of, method):
    return {"op": "snapshot", "name": name, "of": of, "method": method}


def statuses(trace) -> list[str]:
    return [s["status"] for s in trace["steps"]]


class ListSession:
    """Binds names to lists of floats: ``snapshot`` copies, ``fill`` writes in place, ``scale``
    raises, ``read`` does nothing, any other op is unsupported; a name starting with ``bad``
    cannot be observed."""

    def __init__(self, program):
        self.bound = {t["name"]: list(t["value"]) for t in program.tensors}

    def apply(self, op):
        if op["op"] == "snapshot":
            self.bound[op["name"]] = list(self.bound[op["of"]])
        elif op["op"] == "fill":
            self.bound[op["target"]][:] = [op["value"]] * len(self.bound[op["target"]])
        elif op["op"] == "scale":
            raise ZeroDivisionError("planted")
        elif op["op"] != "read":
            raise Unsupported(f"no {op['op']} here")

    def names(self):
        return list(self.bound)

    def observe(self, name):
        if name.startswith("bad"):
            raise KeyError(name)
        v = self.bound[name]
        return observation([len(v)], list(v), None, "list", None)


class DeferringSession(ListSession):
    """TEST DOUBLE of a session that runs ops into a graph a later op ends (torch's ``graph``
    variant): a ``fill`` is held, and the held fills are made after the last of a run of fills,
    so the ops before it are not observed; a held fill of a name starting with ``boom`` fails
    when it is made."""

    def __init__(self, program):
        super().__init__(program)
        self.ops, self.index, self.held = program.ops, -1, []

    def begin_op(self):
        self.index += 1

    def apply(self, op):
        if op["op"] == "fill":
            self.held.append(op)
        else:
            super().apply(op)

    def end_op(self):
        following = self.ops[self.index + 1] if self.index + 1 < len(self.ops) else {}
        if self.held and following.get("op") == "fill":
            return True
        held, self.held = self.held, []
        for op in held:
            if op["target"].startswith("boom"):
                raise RuntimeError("planted graph failure")
            super().apply(op)
        return False


class ListProbe:
    session = ListSession

    def hello(self):
        return {
            "framework": "lists",
            "versions": {"python": sys.version.split()[0]},
            "devices": [{"name": "cpu", "alt": None, "kind": "cpu"}],
            "ops": list(op_table.OP_KINDS),
            "methods": ["clone"],
        }

    def open(self, device, program):
        if device != "cpu":
            raise ValueError(f"no device {device}")
        return self.session(program)


def _serve_lines(*requests, probe=None) -> list[dict]:
    out = io.StringIO()
    lines = b"".join(r if isinstance(r, bytes) else (json.dumps(r) + "\n").encode() for r in requests)
    assert driver.serve(probe or ListProbe(), stdin=io.BytesIO(lines), stdout=out) == 0
    replies = [json.loads(line) for line in out.getvalue().splitlines()]
    for r in replies:
        VALIDATOR.validate(r)
    return [named_observations(r) for r in replies]


def test_driver_serves_a_session_only_probe():
    move = {"op": "move", "target": "w", "device": "cpu", "method": "to"}
    prog = {
        "tensors": [
            {"name": "w", "kind": "param", "shape": [2], "value": [1, "NaN"]},
            {"name": "bad", "kind": "buffer", "shape": [1], "value": [0]},
        ],
        "ops": [
            snap("s", "w", "clone"),
            {"op": "fill", "target": "w", "value": 0.1},
            {"op": "scale", "target": "s", "factor": 2.0},
            move,
            {"op": "read", "target": "nope"},
            {"op": "teleport"},
            {"op": "read"},
            {},
            {"op": "read", "target": "bad"},
        ],
    }
    hello, trace, missing, error = _serve_lines(
        {"type": "hello", "protocol": 99},
        {"type": "run", "id": 1, "device": "cpu", "program": prog},
        {"type": "run", "id": 2, "device": "gpu", "program": prog},
        b"{]\n",
        {"type": "exit"},
        {"type": "hello", "protocol": PROTOCOL_VERSION},
    )  # after exit: never answered
    assert hello["type"] == "hello" and hello["protocol"] == PROTOCOL_VERSION
    assert statuses(trace) == ["ok", "ok", "error", "unsupported", "skipped", "unsupported", "error", "error", "ok"]
    msgs = [s.get("message") for s in trace["steps"]]
    assert msgs[2:8] == [
        "ZeroDivisionError: planted",
        "no move here",
        "no tensor named nope",
        'unknown op "teleport"',
        "malformed op: missing field `target`",
        "malformed op: no string field `op`",
    ]
    # values are float32 on the wire (0.1 rounded), NaN travels as a string; the delta holds
    # only what changed; an observation that raises is unreadable, with the exception as note
    assert trace["initial"]["w"]["value"] == [1.0, "NaN"]
    bad = trace["initial"]["bad"]
    assert bad["value"] is None and bad["note"] == "KeyError: 'bad'"
    w = {**trace["initial"]["w"], "value": [0.10000000149011612] * 2}
    assert trace["steps"][1]["changed"] == {"w": w}
    assert set(trace["steps"][0]["changed"]) == {"s"} and trace["steps"][8]["changed"] == {}
    assert missing["status"] == "error" and missing["message"] == "ValueError: no device gpu"
    assert error["type"] == "error" and error["message"].startswith("malformed request")


def test_an_op_run_into_a_later_ops_graph_is_not_observed_and_a_graph_that_fails_fails_its_last_op():
    probe = ListProbe()
    probe.session = DeferringSession
    fill = lambda target, value: {"op": "fill", "target": target, "value": value}  # noqa: E731
    prog = {
        "tensors": [
            {"name": "w", "kind": "param", "shape": [1], "value": [1]},
            {"name": "boom", "kind": "buffer", "shape": [1], "value": [0]},
        ],
        "ops": [fill("w", 2.0), fill("w", 3.0), {"op": "read", "target": "w"}, fill("boom", 1.0), fill("w", 4.0)],
    }
    (trace,) = _serve_lines({"type": "run", "id": 1, "device": "cpu", "program": prog}, probe=probe)
    steps = trace["steps"]
    assert [s.get("fused", False) for s in steps] == [True, False, False, True, False]
    assert steps[0]["changed"] == {} and steps[1]["changed"]["w"]["value"] == [3.0]
    assert statuses(trace) == ["ok", "ok", "ok", "ok", "error"]
    assert steps[4]["message"] == "RuntimeError: planted graph failure"


def test_op_parsing_follows_the_op_table():
    samples = {
        "name": "w",
        "new": "s",
        "prefix": "m",
        "checkpoint": "c",
        "layer": "bn",
        "number": 0.1,
        "row": 1,
        "values": [0.1, "Infinity"],
        "betas": [0.1, 0.999],
        "flag": True,
    }
    for spec in op_table.OP_TABLE:
        raw = {
            "op": spec.kind,
            **{f.name: f.choices[-1] if f.kind == "choice" else samples[f.kind] for f in spec.fields},
        }
        op = parse_op(raw)
        assert list(op) == ["op"] + [f.name for f in spec.fields]
        for f in spec.fields:
            if f.kind == "number":  # float32 unless wide (the Rust Op's f32 and f64 fields)
                assert op[f.name] == (0.1 if f.wide else 0.10000000149011612), (spec.kind, f.name)
            if f.kind == "values":
                assert op[f.name] == [0.10000000149011612, math.inf]
            if f.kind == "row":  # Option<usize>: absent reads as None
                assert parse_op({k: v for k, v in raw.items() if k != f.name})[f.name] is None
            else:
                with pytest.raises(Malformed, match=f"missing field `{f.name}`"):
                    parse_op({k: v for k, v in raw.items() if k != f.name})
            if f.kind == "choice":
                with pytest.raises(Malformed, match=f"unknown variant `x` for `{f.name}`"):
                    parse_op({**raw, f.name: "x"})
            if f.kind == "flag":  # a bool, never 0 or 1 (serde's bool)
                assert op[f.name] is True
                with pytest.raises(Malformed, match=f"invalid type for `{f.name}`: expected a boolean"):
                    parse_op({**raw, f.name: 1})


def test_fault_hook_is_armed_only_by_a_known_fault(monkeypatch):
    for value, want in (("segfault", "segfault"), ("hang", "hang"), ("", None), ("boom", None)):
        monkeypatch.setenv("ALIASFUZZ_TEST_FAULT", value)
        assert driver.fault_from_env("ALIASFUZZ_TEST_FAULT") == want
    monkeypatch.delenv("ALIASFUZZ_TEST_FAULT")
    assert driver.fault_from_env("ALIASFUZZ_TEST_FAULT") is None
