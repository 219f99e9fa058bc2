"""TEST DOUBLES: fake probe folders and programs with a planted divergence, for the harness's own logic."""

from __future__ import annotations

import sys
from pathlib import Path

from harness.case.ir import Program, TensorDecl, check_program
from tests.conftest import ROOT

FAKE = ROOT / "tests" / "fakes" / "fake_probe.py"


def fake_probe_dir(tmp: Path, *flags: str) -> dict[str, str]:
    """A probe directory whose ``candle_probe`` is the fake; returns the env to use it."""
    d = tmp / "fakeprobe"
    d.mkdir(exist_ok=True)
    script = d / "candle_probe"
    script.write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE} {" ".join(flags)} "$@"\n')
    script.chmod(0o755)
    return {"ALIASFUZZ_PROBE_DIR": str(d)}


def program(tensors, ops) -> Program:
    tensors = tuple(tensors)
    return Program(tensors, check_program(tensors, ops))


W = TensorDecl("w", "param", (2,), (1.0, 2.0))


CLEAN = program(
    [W],
    [
        {"op": "snapshot", "name": "c", "of": "w", "method": "clone"},
        {"op": "write", "target": "w", "index": None, "value": [3.0, 4.0]},
    ],
)


FILLS = program([W], [{"op": "fill", "target": "w", "value": 5.0}])


def statuses(traces):
    return [t.status for t in traces]


def probe_dir(tmp_path: Path, *flags: str) -> Path:
    """A probe folder whose ``candle_probe`` is the TEST DOUBLE fake probe with ``flags``."""
    d = tmp_path / "probes"
    d.mkdir(exist_ok=True)
    script = d / "candle_probe"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE} {' '.join(flags)}\n")
    script.chmod(0o755)
    return d


PLANTED = program(
    [TensorDecl("w", "param", (2, 2), (1.0, 2.0, 3.0, 4.0)), TensorDecl("buf", "buffer", (3,), (0.0, 0.0, 0.0))],
    [
        {"op": "snapshot", "name": "a", "of": "buf", "method": "alias"},
        {"op": "snapshot", "name": "c", "of": "w", "method": "clone"},
        {"op": "fill", "target": "buf", "value": 2.0},
        {"op": "snapshot", "name": "d", "of": "buf", "method": "detach"},
        {"op": "write", "target": "w", "index": 1, "value": [5.0, 6.0]},
        {"op": "scale", "target": "a", "factor": 2.0},
        {"op": "step", "optimizer": "sgd", "lr": 0.5},
    ],
)
