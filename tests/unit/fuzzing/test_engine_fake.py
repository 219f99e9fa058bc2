"""The engine's own logic, on a TEST DOUBLE with one planted divergence (tests/fakes/).

The fake's ``planted`` device returns a shared buffer from ``clone``; ``ref`` copies. The engine
must find that, shrink it to its known minimal form (one param, a clone, one op that changes the
param), and give the same signature however the case is renamed, padded or re-valued.

The tests here run in this process, as the
unit tier requires; those that need real processes are in tests/e2e/test_engine_fake.py.
"""

from __future__ import annotations

from harness.fuzzing.generation import generate


def test_generation_is_deterministic():
    a = [p.key() for p in generate(30, seed=1234, profile="default")]
    b = [p.key() for p in generate(30, seed=1234, profile="default")]
    c = [p.key() for p in generate(30, seed=1235, profile="default")]
    assert a == b and a != c


def test_a_whole_program_failure_is_shrunk_against_another_framework():
    # The partner must run the program cleanly: another framework's plain target first (the same
    # framework's devices and variants likely fail alike; a variant skips programs without a step).
    from harness.fuzzing.engine import _targets_for
    from harness.judging.finding import Finding

    def partner(failing, ids):
        f = Finding("crash", "status", (failing, "-"), "program", None, ("crash", "ok"))
        return _targets_for(f, ids)

    ids = ["torch:cpu", "torch:cpu+foreach", "candle:cpu", "burn:flex"]
    assert partner("torch:cpu", ids) == ["torch:cpu", "candle:cpu"]
    assert partner("candle:cpu", ids) == ["candle:cpu", "torch:cpu"]
    assert partner("torch:cpu", ["torch:cpu+foreach", "torch:cpu"]) == ["torch:cpu", "torch:cpu+foreach"]
    assert partner("burn:flex", ["burn:flex", "burn:ndarray"]) == ["burn:flex", "burn:ndarray"]
    pair = Finding("framework", "verdict", ("candle:cpu", "torch:cpu"), "write", "clone", ("follows", "keeps"))
    assert _targets_for(pair, ids) == ["candle:cpu", "torch:cpu"]
