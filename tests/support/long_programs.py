"""Long programs and their traces, for the verdict scaling test (tests/probes/test_verdict_scaling.py) and
benchmark (tests/bench_verdicts.py).

``long_program(n, seed)`` is a valid program of ``n`` snapshots of two declared tensors and of
each other, with writes, maps, appends and replaces among them (each ends some relations: see
``trace.relation_end``). ``storage_trace(program)`` is a TEST DOUBLE of a target's trace of it:
a small storage model (``alias`` and ``detach`` share their source's storage, every other method
copies it; a write changes a storage and every name over it), enough to give the verdicts their
``follows`` and ``keeps`` events; it is not any framework's semantics.
"""

from __future__ import annotations

import random

from harness.case.ir import Program, TensorDecl, check_program
from harness.targets.trace import Trace

#: Snapshot methods the storage model knows: the first two share their source's storage.
SHARING = ("alias", "detach")
COPYING = ("clone", "mul1")


def long_program(n_snapshots: int, seed: int = 0) -> Program:
    """A checked program with ``n_snapshots`` snapshot ops and about one other op for every four
    of them. Every name holds two floats, so any op fits any name."""
    rng = random.Random(seed)
    tensors = (TensorDecl("p0", "param", (2,), (1.0, 2.0)), TensorDecl("b0", "buffer", (2,), (3.0, 4.0)))
    snapshots: list[str] = []
    ops: list[dict] = []
    for i in range(n_snapshots):
        of = rng.choice(["p0", "b0"] + snapshots[-8:])  # recent snapshots: chains of relations
        ops.append({"op": "snapshot", "name": f"s{i}", "of": of, "method": rng.choice(SHARING + COPYING)})
        snapshots.append(f"s{i}")
        if rng.random() < 0.25:
            ops.append(_other_op(rng, snapshots))
    return Program(tensors, check_program(tensors, ops))


def _other_op(rng: random.Random, snapshots: list[str]) -> dict:
    kind = rng.choices(["write", "scale", "map", "replace"], weights=[6, 2, 2, 1])[0]
    target = rng.choice(["p0", "b0"] + snapshots[-16:])
    if kind == "write":
        return {"op": "write", "target": target, "value": [float(rng.randint(-9, 9)), float(rng.randint(-9, 9))]}
    if kind == "scale":
        return {"op": "scale", "target": target, "factor": 2.0}
    if kind == "map":  # the target is bound again to a new tensor: its relations end
        return {"op": "map", "target": rng.choice(["b0"] + snapshots[-16:]), "fn": rng.choice(["neg", "add_scalar"])}
    # p0's slot gets another tensor: p0's snapshots' relations end, a relation of p0 to it begins
    return {
        "op": "replace",
        "target": "p0",
        "value": rng.choice(snapshots[-16:]),
        "how": rng.choice(["new", "data", "tie"]),
    }


def storage_trace(program: Program, target: str = "model:cpu") -> Trace:
    """TEST DOUBLE: the trace of ``program`` under the storage model of the module docstring."""
    storage: dict[str, int] = {}  # name -> its storage
    holders: dict[int, set[str]] = {}  # storage -> the names over it
    values: dict[int, tuple[float, ...]] = {}
    identity: dict[str, str] = {}

    def bind(name: str, to: int) -> None:
        if name in storage:
            holders[storage[name]].discard(name)
        storage[name] = to
        holders.setdefault(to, set()).add(name)

    def obs(name: str) -> dict:
        return {"shape": [2], "value": list(values[storage[name]]), "identity": identity[name], "device": "cpu"}

    for k, t in enumerate(program.tensors):
        bind(t.name, k)
        values[k] = tuple(t.value)
        identity[t.name] = f"t{k}"
    initial = {t.name: obs(t.name) for t in program.tensors}
    steps = []
    for i, op in enumerate(program.ops):
        touched: set[str] = set()
        kind = op["op"]
        if kind == "snapshot":
            src = op["of"]
            if op["method"] in SHARING:
                bind(op["name"], storage[src])
            else:
                values[len(values)] = values[storage[src]]
                bind(op["name"], len(values) - 1)
            identity[op["name"]] = identity[src] if op["method"] == "alias" else f"s{i}"
            touched.add(op["name"])
        elif kind in ("write", "scale"):
            old = values[storage[op["target"]]]
            values[storage[op["target"]]] = tuple(op["value"]) if kind == "write" else tuple(2.0 * x for x in old)
            touched.update(holders[storage[op["target"]]])
        elif kind == "map":
            old = values[storage[op["target"]]]
            values[len(values)] = tuple(-x for x in old) if op["fn"] == "neg" else tuple(x + 1.0 for x in old)
            bind(op["target"], len(values) - 1)
            identity[op["target"]] = f"m{i}"
            touched.add(op["target"])
        elif kind == "replace":
            bind("p0", storage[op["value"]])
            if op["how"] == "tie":
                identity["p0"] = identity[op["value"]]
            elif op["how"] == "new":
                identity["p0"] = f"r{i}"
            touched.add("p0")
        steps.append({"status": "ok", "changed": {n: obs(n) for n in sorted(touched)}})
    return Trace.from_wire(target, {"initial": initial, "steps": steps})
