"""The ``inductor`` variant of the torch target (``torch:cpu+inductor``): the ops the ``compile``
variant compiles, compiled by Inductor (``backend="inductor"``), whose generated kernels reuse
buffers and write in place. Compiled code must keep eager's values and aliasing.

Inductor's first compile in a process costs tens of seconds (docs/PERFORMANCE.md), so these
tests share one probe process and few distinct lines.
"""

from __future__ import annotations

import json

from harness.case.ir import Program, TensorDecl, check_program
from harness.targets.driver import handle
from harness.targets.torch import COMPILE_VARIANTS
from harness.targets.torch.session import DEVICES, VARIANT_DIFFERS_ON, TorchProbe
from tests.support.probe_client import named_observations

W = (TensorDecl("w", "param", (2, 2), (1.0, 2.0, 3.0, 4.0)),)
# A row write through a transpose of the parameter, then a write of the whole parameter that the
# transpose must follow: the write is compiled as an in-place copy into a view.
THROUGH_A_VIEW = [
    {"op": "snapshot", "name": "s", "of": "w", "method": "transpose"},
    {"op": "write", "target": "s", "index": 0, "value": [9.0, 8.0]},
    {"op": "write", "target": "w", "value": [[5.0, 6.0], [7.0, 0.5]]},
]


def _run(device: str, ops: list) -> dict:
    program = Program(W, check_program(W, ops))
    request = {"type": "run", "id": 1, "device": device, "program": program.to_wire(), "transcript": True}
    return named_observations(handle(TorchProbe(), json.dumps(request).encode()))


def _states(trace: dict) -> list[dict]:
    """What every name holds after each op."""
    state, out = dict(trace["initial"]), []
    for step in trace["steps"]:
        state.update(step["changed"])
        out.append({name: obs["value"] for name, obs in state.items()})
    return out


def test_the_variant_compiles_the_same_ops_as_compile_with_inductor():
    assert DEVICES["cpu+inductor"][:3] == ("cpu", "inductor", "cpu")
    assert VARIANT_DIFFERS_ON["inductor"] == VARIANT_DIFFERS_ON["compile"]
    assert COMPILE_VARIANTS["inductor"] == {"backend": "inductor", "dynamic": False}


def test_an_in_place_write_through_a_view_under_inductor_gives_eagers_values():
    eager, compiled = _run("cpu", THROUGH_A_VIEW), _run("cpu+inductor", THROUGH_A_VIEW)
    assert all(step["status"] == "ok" for step in compiled["steps"]), compiled["steps"]
    assert _states(compiled) == _states(eager)
    # the row written through the transpose is the parameter's first column, and the transpose
    # follows the later write of the parameter (values row-major)
    assert _states(compiled)[1]["w"] == [9.0, 2.0, 8.0, 4.0]
    assert _states(compiled)[2]["s"] == [5.0, 7.0, 6.0, 0.5]
    # the transcript is what ran: the snapshot and the row write are functions compiled by
    # Inductor, the write an assignment into the view the first one returned
    ops = compiled["transcript"]["ops"]
    assert [lines[0] for lines in ops] == ["@torch.compile(backend='inductor', dynamic=False)"] * 3
    assert "    s = w.transpose(-2, -1)" in ops[0] and "        s[0] = value0" in ops[1]


def test_the_variant_is_a_target_only_where_it_is_named_by_its_id():
    """On request (PROTOCOL.md): neither the default of every target nor the framework's name
    brings it in; its id does, and ``aliasfuzz targets`` (``every_device``) lists it."""
    from harness.targets.registry import discover

    def ids(*wanted: str, every_device: bool = False) -> set[str]:
        with discover(list(wanted), every_device=every_device) as found:
            return {t.id for t in found.targets}

    assert "torch:cpu+inductor" not in ids("torch")
    assert ids("torch:cpu", "torch:cpu+inductor") == {"torch:cpu", "torch:cpu+inductor"}
    assert "torch:cpu+inductor" in ids("torch", every_device=True)
