"""The torch target's observation cache (``TorchSession.observe``) is invisible in its traces.

The cache hands back a name's last observation unless something that could change it changed.
Here every generated program runs twice in this process through the Python driver: with the
session as served, and with a session that reads every name after every op. The two traces must
be the same, identity tokens compared by the order in which they first appear (``id()`` values
differ between two runs). A write the cache's keys do not see (a tensor over the same bytes with
a version counter and a storage object of its own) shows here as an observation kept too long:
one such write (through the numpy round trip of rows 1..) came up once in the aliasing profile's
2,944 programs before the cache compared byte ranges; ``test_torch_target.py`` pins that case.
"""

from __future__ import annotations

import json

import pytest
import torch

from generators.profiles import Profile
from harness.fuzzing.engine import chunk_seed
from harness.fuzzing.generation import generate
from harness.targets import driver
from harness.targets.protocol import OBS_FIELDS, unreadable
from harness.targets.torch.observe import observation
from harness.targets.torch.session import TorchProbe, TorchSession

PROGRAMS = 3000
#: The default profile, and one of snapshots and writes alone: where tensors share memory.
ALIASING = Profile(
    "snapshots-and-writes",
    max_ops=10,
    weights=(("snapshot", 6), ("write", 3), ("fill", 3), ("scale", 2), ("map", 1), ("append", 1)),
)
IDENTITY = OBS_FIELDS.index("identity")
STORAGE = OBS_FIELDS.index("storage")


class ReadEverythingSession(TorchSession):
    """The torch session with the cache bypassed: every name is read after every op."""

    def observe(self, name: str) -> list:
        try:
            return observation(self.bound[name])
        except Exception as e:  # noqa: BLE001 - as TorchSession.observe
            return unreadable(f"{type(e).__name__}: {e}")


class ReadEverythingProbe(TorchProbe):
    def open(self, device, program):
        return ReadEverythingSession(device, program.tensors, program.layers, program.dtype)


def canonical(reply: dict) -> dict:
    """``reply`` with each identity token replaced by the order of its first appearance (``id()``
    values differ between two runs), its storage tokens dropped (an address freed in one run may
    be reused in the other: ``storage_partitions`` compares them) and their partition of every
    state's names added."""
    order: dict[str, str] = {}

    def tokens(obs: list) -> list:
        obs = list(obs)
        if obs[IDENTITY] is not None:
            obs[IDENTITY] = order.setdefault(obs[IDENTITY], f"#{len(order)}")
        if len(obs) > STORAGE:
            obs = obs[:STORAGE]  # compared as a partition of each state's names: ``storage_partitions``
        return obs

    out = {k: v for k, v in reply.items() if k != "elapsed_us"}
    out["initial"] = {n: tokens(o) for n, o in reply["initial"].items()}
    out["steps"] = [{**s, "changed": {n: tokens(o) for n, o in s["changed"].items()}} for s in reply["steps"]]
    out["storage"] = storage_partitions(reply)
    return out


def storage_partitions(reply: dict) -> list[list[list[str]]]:
    """After each op, the names of the state that share one storage token, in groups (sorted):
    what the sharing oracle reads of the tokens, whatever the addresses are."""
    if "initial" not in reply:
        return []
    state = dict(reply["initial"])
    out = []
    for step in [{"changed": {}}] + reply["steps"]:
        state.update(step["changed"])
        groups: dict[str, list[str]] = {}
        for name, obs in state.items():
            if len(obs) > STORAGE and obs[STORAGE] is not None:
                groups.setdefault(obs[STORAGE], []).append(name)
        out.append(sorted(sorted(g) for g in groups.values()))
    return out


def run(probe, id: int, program: dict) -> dict:
    """The canonical trace of the wire program ``program`` on ``probe``'s cpu device."""
    torch.manual_seed(0)  # a dropout draws from torch's global generator: the same draws in both runs
    line = json.dumps({"type": "run", "id": id, "device": "cpu", "program": program}).encode()
    return canonical(driver.handle(probe, line))


@pytest.mark.timeout(600)
@pytest.mark.parametrize("profile", ["default", ALIASING], ids=["default", "aliasing"])
def test_the_observation_cache_changes_no_trace(profile):
    programs = [p for k in range(PROGRAMS // 64) for p in generate(64, chunk_seed(3, k), profile)]
    cached, uncached = TorchProbe(), ReadEverythingProbe()
    differ = []
    for i, program in enumerate(programs):
        wire = program.to_wire()
        a, b = run(cached, i, wire), run(uncached, i, wire)
        if a != b:
            differ.append((i, wire, a, b))
    assert len(programs) >= PROGRAMS - 64
    assert not differ, f"{len(differ)} of {len(programs)} programs trace otherwise; the first: {differ[0]}"


def test_a_step_through_a_param_no_name_binds_shows_in_the_name_over_its_storage():
    """After ``w.data = c.w`` and ``load_state_dict(assign=True)``, the optimizer still holds the
    old Parameter, over c.w's storage, and a step writes it: no bound name's version counter moves
    (the Parameter's is its own), so the cache must also watch what the optimizers hold. Found by a
    deep-profile campaign as an unused ``narrow`` of the old param changing the step (its view's
    version counter is the param's)."""
    from harness.case.case_file import FORMAT, parse_case

    adamw = {"op": "step", "optimizer": "adamw", "lr": 0.5, "weight_decay": 0.0}
    program = parse_case(
        {
            "format": FORMAT,
            "tensors": {"p0": {"kind": "param", "value": [[0.0], [0.0]]}},
            "ops": [
                {"op": "save", "name": "c0", "to": "file"},
                adamw,
                {"op": "save", "name": "c1"},
                {"op": "replace", "target": "p0", "value": "c0.p0", "how": "data"},
                {"op": "backward"},
                {"op": "load", "from": "c1", "assign": True},
                adamw,
            ],
        }
    )
    cached = run(TorchProbe(), 0, program.to_wire())
    assert cached == run(ReadEverythingProbe(), 0, program.to_wire())
    assert "c0.p0" in cached["steps"][-1]["changed"]  # the step moved c0.p0 through the old param


def test_the_comparison_sees_a_kept_observation():
    """The check above can fail: a session that never re-reads a name after the first time gives
    a trace that differs from the read-everything one on a program whose write moves a name."""

    class KeepsEverything(TorchSession):
        def observe(self, name):
            self._kept = getattr(self, "_kept", {})
            if name not in self._kept:
                self._kept[name] = observation(self.bound[name])
            return self._kept[name]

    class KeepsEverythingProbe(TorchProbe):
        def open(self, device, program):
            return KeepsEverything(device, program.tensors, program.layers, program.dtype)

    program = {
        "tensors": [{"name": "w", "kind": "param", "shape": [2], "value": [1.0, 2.0]}],
        "ops": [{"op": "fill", "target": "w", "value": 9.0}],
    }
    assert run(KeepsEverythingProbe(), 0, program) != run(ReadEverythingProbe(), 0, program)
