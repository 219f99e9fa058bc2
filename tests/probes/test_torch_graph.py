"""The ``graph`` variant of the torch target (``torch:cpu+graph``): each run of ops the op table
fuses runs as one ``torch.compile``d function (``backend="aot_eager"``), observed after the
run's last op, and must keep eager's values and aliasing across the ops of the run.

What a snapshot method does when the snapshot and a write through it or into its source share
one compiled function is in tests/probes/test_torch_target.py, parametrized over ``cpu``,
``cpu+compile`` and ``cpu+graph``. Here: what the transcript and the trace say of a run, an op
that fails inside a run, the reproducer, and the candidate where eager and the graph disagree.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from harness.case.case_file import load_case
from harness.case.ir import Program, TensorDecl, check_program
from harness.fuzzing.baseline import load_baseline
from harness.fuzzing.replay import run_case
from harness.targets.driver import handle
from harness.targets.reproducer_base import Check
from harness.targets.torch.reproducer import torch_script
from harness.targets.torch.session import TorchProbe
from tests.conftest import CASES
from tests.support.probe_client import named_observations

W = (TensorDecl("w", "param", (2, 2), (1.0, 2.0, 3.0, 4.0)),)
CHUNK = "torch_graph_chunk_of_a_parameter_written_in_the_same_graph_is_a_copy.toml"


def _run(program: Program, device: str) -> dict:
    request = {"type": "run", "id": 1, "device": device, "program": program.to_wire(), "transcript": True}
    return named_observations(handle(TorchProbe(), json.dumps(request).encode()))


def _states(trace: dict) -> list[dict]:
    """The values after each op."""
    state, out = {n: o["value"] for n, o in trace["initial"].items()}, []
    for step in trace["steps"]:
        state = {**state, **{n: o["value"] for n, o in step["changed"].items()}}
        out.append(state)
    return out


def _program(ops: list[dict], tensors=W) -> Program:
    return Program(tensors, check_program(tensors, ops))


def test_a_run_of_fusing_ops_is_one_compiled_function_observed_after_its_last_op():
    program = _program(
        [
            {"op": "snapshot", "name": "s", "of": "w", "method": "view_row"},
            {"op": "write", "target": "w", "value": [7.0, 8.0], "index": 0},
            {"op": "scale", "target": "s", "factor": 2.0},
            {"op": "step", "optimizer": "sgd", "lr": 1.0},
        ]
    )
    trace = _run(program, "cpu+graph")
    assert [s["status"] for s in trace["steps"]] == ["ok"] * 4
    assert [s.get("fused", False) for s in trace["steps"]] == [True, True, False, False]
    assert trace["steps"][0]["changed"] == trace["steps"][1]["changed"] == {}
    ops = trace["transcript"]["ops"]
    assert ops[0] == ops[1] == []
    assert ops[2] == [
        "@torch.compile(backend='aot_eager', dynamic=False)",
        "def graph(w, value0):",
        "    s = w.narrow(0, 0, 1)",
        "    with torch.no_grad():",
        "        w[0] = value0",
        "    with torch.no_grad():",
        "        s.mul_(2.0)",
        "    return s",
        "s = graph(w, torch.tensor([7.0, 8.0]))",
    ]
    # A step is no fusing op: its lines run as in eager torch, and it ends the run before it.
    eager = _run(program, "cpu")
    assert ops[3] == eager["transcript"]["ops"][3]
    # After each observed op, eager's values: the write through the view and the scale of it
    # reached the parameter inside one graph.
    graph_states, eager_states = _states(trace), _states(eager)
    assert graph_states[2] == eager_states[2] == {"w": [14.0, 16.0, 3.0, 4.0], "s": [14.0, 16.0]}
    assert graph_states[3] == eager_states[3]


def test_an_op_that_fails_in_a_run_fails_on_both_sides_with_the_same_state_after_it():
    # A write into an expanded view (two elements over one memory location): torch refuses it in
    # eager code, and the graph's replay runs the op eagerly after compiling the run before it,
    # so it fails at the same op, over the same state.
    w = (TensorDecl("w", "param", (1, 2), (1.0, 2.0)),)
    program = _program(
        [
            {"op": "snapshot", "name": "s", "of": "w", "method": "alias"},
            {"op": "fill", "target": "s", "value": 5.0},
            {"op": "snapshot", "name": "e", "of": "w", "method": "expand"},
            {"op": "write", "target": "e", "value": [1.0, 2.0, 3.0, 4.0]},
            {"op": "scale", "target": "s", "factor": 2.0},
        ],
        w,
    )
    graph, eager = _run(program, "cpu+graph"), _run(program, "cpu")
    assert (
        [s["status"] for s in graph["steps"]] == [s["status"] for s in eager["steps"]] == ["ok"] * 3 + ["error", "ok"]
    )
    assert graph["steps"][3]["message"] == eager["steps"][3]["message"]
    assert "more than one element of the written-to tensor" in eager["steps"][3]["message"]
    assert [s.get("fused", False) for s in graph["steps"]] == [True, True, True, False, False]
    assert _states(graph)[3:] == _states(eager)[3:]
    assert _states(graph)[4]["w"] == [10.0, 10.0]


def _printed_states(stdout: str, prefix: str = "") -> dict[int, dict[str, list[float]]]:
    """The ``after op i: name = [...]`` lines a reproducer printed, by op."""
    out: dict[int, dict[str, list[float]]] = {}
    for m in re.finditer(rf"^{re.escape(prefix)}after op (\d+): (\S+) = (\[.*\])$", stdout, re.M):
        out.setdefault(int(m.group(1)), {})[m.group(2)] = json.loads(m.group(3))
    return out


def test_the_reproducer_shows_what_the_trace_observed_and_nothing_inside_a_run(tmp_path):
    program = load_case(CASES / CHUNK)
    trace = _run(program, "cpu+graph")
    script = tmp_path / "r.py"
    script.write_text(torch_script(program, device="cpu+graph"), encoding="utf-8")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    printed = _printed_states(r.stdout)
    observed = {i: state for i, state in enumerate(_states(trace)) if not trace["steps"][i].get("fused")}
    assert printed == observed
    assert "# op 0 runs in the compiled function of the ops after it" in script.read_text(encoding="utf-8")


def test_the_chunk_candidate_diverges_from_eager_and_its_reproducer_exits_1(tmp_path):
    """The candidate ``torch_graph_chunk_of_a_parameter_written_in_the_same_graph_is_a_copy``:
    eager torch returns the chunk as a view of w, so the fill writes w; the compiled run that
    wrote w returns it over a storage of its own. The per-op ``compile`` variant, which compiles
    the write and the chunk apart, agrees with eager."""
    program = load_case(CASES / CHUNK)
    finals = {d: _states(_run(program, d))[-1] for d in ("cpu", "cpu+compile", "cpu+graph")}
    assert finals["cpu"] == finals["cpu+compile"] == {"w": [0.0, 0.0], "s": [0.0]}
    assert finals["cpu+graph"] == {"w": [1.0, 0.0], "s": [0.0]}
    script = tmp_path / "r.py"
    script.write_text(torch_script(program, None, ("plain", "graph")), encoding="utf-8")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "the divergence shows: ['w'] differ" in r.stdout, r.stdout + r.stderr


def test_a_counter_check_of_an_op_inside_a_run_is_made_where_the_run_ends(tmp_path):
    # The row copy from w into its memory checkpoint entry bumps w's version counter in eager
    # torch; the graph's run (the copy and the `data` snapshot after it) leaves it. The check
    # is of op 1, which the graph observes only after op 2.
    w = (TensorDecl("w", "param", (1,), (0.0,)),)
    ops = [
        {"op": "save", "name": "c"},
        {"op": "assign", "target": "c.w", "source": "w", "index": 0, "source_index": 0},
        {"op": "snapshot", "name": "s", "of": "w", "method": "data"},
    ]
    program = _program(ops, w)
    assert [s.get("fused", False) for s in _run(program, "cpu+graph")["steps"]] == [False, True, False]
    check = Check(1, "w", None, "torch:cpu", counter=True)
    script = tmp_path / "r.py"
    script.write_text(torch_script(program, check, ("plain", "graph")), encoding="utf-8")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert "check: op 1 moves the version counter of w: True without graph, False with it" in r.stdout, (
        r.stdout + r.stderr
    )
    assert r.returncode == 1


#: The candidates the compiled targets found, each with the divergence its case shows.
CANDIDATES = {
    CHUNK: "variant|torch:cpu~torch:cpu+graph|verdict|chunk|write|rev follows~rev keeps",
    "torch_compile_refuses_a_fill_of_an_expanded_view.toml": "variant|torch:cpu~torch:cpu+graph|value|expand|fill|changed~changed",
    "torch_graph_write_into_a_parameter_and_its_copy_copy_fails_to_compile.toml": (
        "error|torch:cpu~torch:cpu+graph|status|-|add|ok~error"
    ),
    "torch_compile_forward_of_a_chunk_after_a_step_is_refused.toml": (
        "error|torch:cpu~torch:cpu+compile|status|-|forward|ok~error"
    ),
}


@pytest.mark.parametrize("case", sorted(CANDIDATES))
def test_a_compiled_candidate_shows_its_divergence_and_no_baseline_entry_explains_it(case, runner):
    """Each candidate case still shows its divergence on the real targets, unexplained: when
    torch fixes it, this fails, and the case moves to a regression test."""
    sub = runner.subset(["torch:cpu", "torch:cpu+compile", "torch:cpu+graph"])
    result = run_case(load_case(CASES / case), sub, sub.infos, load_baseline())
    assert CANDIDATES[case] in result.known, sorted(result.known)
    assert result.known[CANDIDATES[case]] is None
