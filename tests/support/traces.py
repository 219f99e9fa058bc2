"""Hand-written traces and programs for the oracle tests (harness logic: no framework runs)."""

from __future__ import annotations

from harness.case.case_file import FORMAT, parse_case
from harness.targets.trace import Trace

A, B = "alpha:cpu", "beta:cpu"


def program(tensors: dict, ops: list):
    return parse_case({"format": FORMAT, "tensors": tensors, "ops": ops})


def trace(
    target: str, initial: dict, steps: list, statuses: list | None = None, same: dict | None = None, fused=()
) -> Trace:
    """``initial`` and each step: name -> value list (flat, shape [n]); identity tokens are the
    names themselves (``same`` maps a name to the name whose object it is), so no identity
    divergence is made up here. ``fused``: the steps after which the target observed nothing
    (a compiled run's inner ops: their ``changed`` must be empty)."""
    same = same or {}

    def obs(name, value):  # None: a lazy parameter not initialised yet
        return {
            "shape": [1 if value is None else len(value)],
            "value": value,
            "device": "cpu",
            "requires_grad": None,
            "identity": f"{target}:{same.get(name, name)}",
            "initialized": value is not None,
        }

    statuses = statuses or ["ok"] * len(steps)
    return Trace.from_wire(
        target,
        {
            "status": "ok",
            "initial": {n: obs(n, v) for n, v in initial.items()},
            "steps": [
                {
                    "status": st,
                    "changed": {n: obs(n, v) for n, v in s.items()},
                    **({"fused": True} if i in fused else {}),
                }
                for i, (st, s) in enumerate(zip(statuses, steps))
            ],
        },
    )


P0 = {"p0": {"kind": "param", "value": [0.0]}}


STEP = {"op": "step", "optimizer": "sgd", "lr": 1.0}
