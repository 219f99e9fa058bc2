"""Reading traces and comparing observed values (harness logic: no framework runs here)."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from harness.oracle import values_close
from harness.trace import MalformedTrace, Observation, Trace, same_values


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
    assert values_close(f32(0.0, np.nan), f32(-0.0, np.nan), exact=True)
    assert not values_close(f32(1.0), f32(np.nextafter(np.float32(1.0), np.float32(2.0))), exact=True)
    assert values_close(f32(1.0), f32(np.nextafter(np.float32(1.0), np.float32(2.0))), exact=False)
    assert not values_close(f32(1.0), f32(1.1), exact=False)
    assert not values_close(f32(1.0, 2.0), f32(1.0), exact=False)


def test_observation_reads_the_wire_floats_and_refuses_null():
    obs = Observation.from_wire({"shape": [2, 2], "value": [1, 0.5, "NaN", "-Infinity"],
                                 "identity": "t1", "device": "cpu"})
    assert obs.value.dtype == np.float32 and obs.value.shape == (2, 2)
    assert obs.value[0, 0] == 1.0 and np.isnan(obs.value[1, 0]) and obs.value[1, 1] == -np.inf
    with pytest.raises(TypeError):
        Observation.from_wire({"shape": [1], "value": [None]})


@pytest.mark.parametrize("reply", [
    {"initial": {"w": {"shape": 7, "value": [1.0]}}},
    {"initial": {"w": {"shape": [1], "value": [None]}}},
    {"initial": {"w": {"shape": [1], "value": ["one"]}}},
    {"initial": {}, "steps": [{"changed": {}}]},  # no status
    {"initial": [], "steps": []},
])
def test_a_malformed_trace_reply_is_one_malformed_trace_error(reply):
    with pytest.raises(MalformedTrace) as info:
        Trace.from_wire("fake:ref", {"type": "trace", "id": 1, **reply})
    assert str(info.value).startswith("malformed trace: ") and "\n" not in str(info.value)
