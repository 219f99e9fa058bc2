"""Reading traces and comparing observed values (harness logic: no framework runs here)."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from harness.judging.value_compare import ADAM_RTOL, Tolerance, values_close
from harness.judging.verdicts import same_values
from harness.targets.protocol import OBS_FIELDS, OBS_REQUIRED, observation
from harness.targets.trace import MalformedTrace, Observation, Trace, alike


def f32(*xs) -> np.ndarray:
    return np.array(xs, dtype=np.float32)


def nan_with_payload(payload: int) -> np.float32:
    return np.frombuffer(struct.pack("<I", 0x7FC00000 | payload), dtype=np.float32)[0]


def test_same_values_is_value_equality_with_nan_equal_to_nan():
    assert same_values(f32(1.0, 2.0), f32(1.0, 2.0))
    assert not same_values(f32(1.0, 2.0), f32(1.0, 2.5))
    # Bitwise different, equal as values: the sign of zero, and NaNs with other payloads.
    assert same_values(f32(0.0, 1.0), f32(-0.0, 1.0))
    assert same_values(f32(nan_with_payload(1), 1.0), f32(nan_with_payload(2), 1.0))
    assert not same_values(f32(np.nan, 1.0), f32(0.0, 1.0))
    assert not same_values(f32(1.0, 2.0), f32(1.0, 2.0).reshape(2, 1))  # shapes count
    assert same_values(None, None) and not same_values(None, f32(1.0))


def test_values_close_exact_and_within_adams_tolerance():
    # None compares exactly; Adam's tolerance (a learning rate as its floor) within a few ulps.
    adam = Tolerance(ADAM_RTOL, 0.1)
    assert values_close(f32(0.0, np.nan), f32(-0.0, np.nan), None)
    assert not values_close(f32(1.0), f32(np.nextafter(np.float32(1.0), np.float32(2.0))), None)
    assert values_close(f32(1.0), f32(np.nextafter(np.float32(1.0), np.float32(2.0))), adam)
    assert not values_close(f32(1.0), f32(1.1), adam)
    assert not values_close(f32(1.0, 2.0), f32(1.0), adam)


def test_observation_reads_the_wire_floats_and_refuses_null():
    obs = Observation.from_wire(
        {"shape": [2, 2], "value": [1, 0.5, "NaN", "-Infinity"], "identity": "t1", "device": "cpu"}
    )
    assert obs.value.dtype == np.float32 and obs.value.shape == (2, 2)
    assert obs.value[0, 0] == 1.0 and np.isnan(obs.value[1, 0]) and obs.value[1, 1] == -np.inf
    with pytest.raises(TypeError):
        Observation.from_wire({"shape": [1], "value": [None]})


@pytest.mark.parametrize(
    "reply",
    [
        {"initial": {"w": {"shape": 7, "value": [1.0]}}},
        {"initial": {"w": {"shape": [1], "value": [None]}}},
        {"initial": {"w": {"shape": [1], "value": ["one"]}}},
        {"initial": {}, "steps": [{"changed": {}}]},  # no status
        {"initial": [], "steps": []},
    ],
)
def test_a_malformed_trace_reply_is_one_malformed_trace_error(reply):
    with pytest.raises(MalformedTrace) as info:
        Trace.from_wire("fake:ref", {"type": "trace", "id": 1, **reply})
    assert str(info.value).startswith("malformed trace: ") and "\n" not in str(info.value)


def test_a_snapshot_that_did_not_move_keeps_even_when_its_source_lands_on_its_value():
    # s0 = p0 * 1, s0 filled with 0, then a step brings p0 to exactly 0: s0 holds what p0 now
    # holds, but it did not move with it (it held 0 while p0 held 0.5): that is keeps, not follows.
    # A snapshot sharing p0's storage would have moved at the step.
    from harness.case.case_file import FORMAT, parse_case
    from harness.judging.verdicts import verdicts

    prog = parse_case(
        {
            "format": FORMAT,
            "tensors": {"p0": {"kind": "param", "value": [0.5]}},
            "ops": [
                {"op": "snapshot", "name": "s0", "of": "p0", "method": "mul1"},
                {"op": "fill", "target": "s0", "value": 0.0},
                {"op": "step", "optimizer": "sgd", "lr": 0.5},
            ],
        }
    )

    def obs(v):
        return {"shape": [1], "value": [v], "identity": None}

    def run(shared: bool):
        after_fill = {"s0": obs(0.0), **({"p0": obs(0.0)} if shared else {})}
        return Trace.from_wire(
            "alpha:cpu",
            {
                "initial": {"p0": obs(0.5)},
                "steps": [
                    {"status": "ok", "changed": {"s0": obs(0.5)}},
                    {"status": "ok", "changed": after_fill},
                    {"status": "ok", "changed": {"p0": obs(0.0)} if not shared else {"p0": obs(-0.5), "s0": obs(-0.5)}},
                ],
            },
        )

    assert verdicts(prog, run(shared=False))["s0"].summary == "rev keeps@1 keeps@2"
    assert verdicts(prog, run(shared=True))["s0"].summary == "rev follows@1 follows@2"


def test_a_lazy_snapshot_first_given_its_sources_value_is_no_event_yet():
    # burn: a clone of an uninitialised lazy parameter gets its value when the step initialises
    # and trains the parameter. Equal to the trained value: one shared initialisation, or the
    # step left the init value in place; nothing tells which yet. Another value: it keeps.
    from harness.case.case_file import FORMAT, parse_case
    from harness.judging.verdicts import verdicts

    prog = parse_case(
        {
            "format": FORMAT,
            "tensors": {"l0": {"kind": "lazy", "shape": [1], "init": "const", "fill": -2.0}},
            "ops": [
                {"op": "module_clone", "name": "m0"},
                {"op": "step", "optimizer": "adamw", "lr": 1.0, "weight_decay": 0.5},
            ],
        }
    )

    def obs(v):
        return {"shape": [1], "value": None if v is None else [v], "identity": None, "initialized": v is not None}

    def run(clone_value):
        return Trace.from_wire(
            "beta:cpu",
            {
                "initial": {"l0": obs(None)},
                "steps": [
                    {"status": "ok", "changed": {"m0.l0": obs(None)}},
                    {"status": "ok", "changed": {"l0": obs(-2.0), "m0.l0": obs(clone_value)}},
                ],
            },
        )

    assert verdicts(prog, run(-2.0))["m0.l0"].summary == "unchanged"
    assert verdicts(prog, run(-1.5))["m0.l0"].summary == "keeps"


def test_facts_of_a_program_are_worked_out_once_per_program_object(monkeypatch):
    from harness.case import ir
    from harness.case.ir import Program, TensorDecl, check_program, per_program
    from harness.judging.verdicts import relation_end, snapshots

    calls = []

    @per_program
    def n_ops(program):
        calls.append(program)
        return len(program.ops)

    tensors = (TensorDecl("p0", "param", (2,), (1.0, 2.0)),)
    ops = check_program(
        tensors,
        [
            {"op": "snapshot", "name": "s0", "of": "p0", "method": "clone"},
            {"op": "replace", "target": "p0", "value": "s0"},
        ],
    )
    a, b = Program(tensors, ops), Program(tensors, ops[:1])
    assert (n_ops(a), n_ops(a), n_ops(b)) == (2, 2, 1) and calls == [a, b]
    assert n_ops(Program(tensors, ops)) == 2 and len(calls) == 3  # an equal program, another object
    monkeypatch.setattr(ir, "PER_PROGRAM_LIMIT", 1)
    n_ops(Program(tensors, ops[:1]))  # a fourth program: past the limit, the cache starts afresh
    assert n_ops(a) == 2 and calls[-1] is a and len(calls) == 5
    # The relation of s0 ends where the replace rebinds its source's slot; a trace cut short
    # ends it at its own length.
    snap = snapshots(a)[0]
    assert relation_end(a, snap, 2) == 1 and relation_end(b, snapshots(b)[0], 1) == 1
    assert relation_end(a, snap, 1) == 1 and relation_end(b, snapshots(b)[0], 5) == 5


def _wire(
    identities=("i1", "i1", "i2"),
    values=((1.0, 2.0), (1.0, 2.0), (0.0,)),
    dtype="f32",
    status="ok",
    names=("w", "a", "c"),
):
    def obs(k):
        return {
            "shape": [len(values[k])],
            "value": list(values[k]),
            "device": "cpu",
            "requires_grad": False,
            "identity": identities[k],
            "initialized": True,
            "dtype": dtype,
        }

    return {
        "status": "ok",
        "initial": {names[0]: obs(0)},
        "steps": [{"status": "ok", "changed": {names[1]: obs(1)}}, {"status": status, "changed": {names[2]: obs(2)}}],
    }


@pytest.mark.parametrize(
    "other, is_alike",
    [
        (_wire(), True),
        (_wire(identities=("x9", "x9", "x3")), True),  # the same grouping under other tokens
        (_wire(identities=("i1", "i2", "i2")), False),  # a snapshot that shares on one side only
        (_wire(identities=("i1", "i1", None)), False),
        (_wire(values=((1.0, 2.0), (1.0, 2.0), (-0.0,))), False),  # bitwise: -0.0 is not 0.0 here
        (_wire(values=((1.0, 2.0), (1.0,), (0.0,))), False),
        (_wire(dtype="bf16"), False),
        (_wire(status="error"), False),
        (_wire(names=("w", "a", "d")), False),
    ],
)
def test_alike_tells_apart_every_aspect_the_oracle_compares(other, is_alike):
    # ``alike`` is the oracle's per-pair fast path: a pair it calls alike is not compared at all,
    # so it must see statuses, names, shapes, dtypes, value bits and the identity grouping.
    a, b = Trace.from_wire("a:cpu", _wire()), Trace.from_wire("b:cpu", other)
    assert alike(a, b) == alike(b, a) == is_alike


def test_an_observation_read_from_the_wire_is_the_one_the_constructor_makes():
    raw = {
        "shape": [2, 1],
        "value": [1.0, "NaN"],
        "device": "cpu",
        "requires_grad": True,
        "identity": "t1",
        "initialized": True,
        "dtype": "bf16",
        "note": "n",
    }
    obs = Observation.from_wire(raw)
    made = Observation((2, 1), np.array([[1.0], [np.nan]], dtype=np.float32), "cpu", True, "t1", True, "n", "bf16")
    assert repr(obs) == repr(made) and obs.value.shape == (2, 1)
    with pytest.raises(AttributeError):  # still frozen
        obs.identity = "t2"
    flat = Observation.from_wire({"shape": [3], "value": [1.0, 2.0, 3.0], "identity": None, "initialized": False})
    assert flat.value.shape == (3,) and flat.device == "" and flat.initialized is False and flat.dtype is None


def test_a_wire_observation_is_read_field_by_field_in_the_protocols_order():
    # The probes send an observation as a list of OBS_FIELDS; from_wire unpacks it by position.
    fields = {
        "shape": [2],
        "value": [0.5, "Infinity"],
        "identity": "t3",
        "device": "flex",
        "requires_grad": False,
        "initialized": False,
        "dtype": "f16",
        "note": "why",
        "storage": "cpu:7f00",
        "version": 3,
    }
    wire = observation(*(fields[f] for f in OBS_FIELDS))
    assert wire == [fields[f] for f in OBS_FIELDS]
    assert repr(Observation.from_wire(wire)) == repr(Observation.from_wire(fields))
    assert Observation.from_wire(wire).storage == "cpu:7f00" and Observation.from_wire(wire).version == 3
    # storage and version are optional: a probe that has neither sends the first OBS_REQUIRED fields
    unknown = observation(*(fields[f] for f in OBS_FIELDS[:OBS_REQUIRED]))
    assert len(unknown) == OBS_REQUIRED and Observation.from_wire(unknown).storage is None
    assert Observation.from_wire(unknown).version is None
    # a version without a storage token (a tensor over no memory of its own) keeps its place
    versioned = observation(*(fields[f] for f in OBS_FIELDS[:OBS_REQUIRED]), version=0)
    assert versioned[-2:] == [None, 0]
    assert Observation.from_wire(versioned).version == 0 and Observation.from_wire(versioned).storage is None
    assert Observation.from_wire(versioned).to_json()["version"] == 0
    with pytest.raises(MalformedTrace):  # a list of another length is a malformed trace
        Trace.from_wire("a:cpu", {"initial": {"w": wire[:7]}, "steps": []})
