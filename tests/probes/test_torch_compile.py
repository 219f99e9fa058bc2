"""The ``compile`` variant of the torch target (``torch:cpu+compile``): every op that computes or
writes tensors runs its statements as ``torch.compile``d functions (``backend="aot_eager"``), and
compiled code must keep eager's values and aliasing.

What a snapshot method does under compile against what the docs say (writes through views
included) is in tests/probes/test_torch_target.py, parametrized over ``cpu`` and
``cpu+compile``. Here: the transcript says what was compiled, the reproducer runs as written,
one compiled function serves every program with that line, and the one place where eager and
compiled torch are known to disagree.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from harness.case.case_file import load_case
from harness.case.ir import Program, TensorDecl, check_program
from harness.targets.driver import handle
from harness.targets.torch import COMPILE_VARIANTS
from harness.targets.torch.reproducer import torch_script
from harness.targets.torch.session import TorchProbe
from harness.targets.torch.transcript import compiled_template
from tests.conftest import CASES
from tests.support.probe_client import named_observations

BATCH_NORM = "torch_batch_norm_normalizes_an_input_it_updated.toml"
W = (TensorDecl("w", "param", (2,), (1.0, 2.0)),)


def _run(case: str, device: str) -> dict:
    program = load_case(CASES / case).to_wire()
    request = {"type": "run", "id": 1, "device": device, "program": program, "transcript": True}
    return named_observations(handle(TorchProbe(), json.dumps(request).encode()))


def _final(trace: dict) -> dict:
    state = dict(trace["initial"])
    for step in trace["steps"]:
        state.update(step["changed"])
    return {name: obs["value"] for name, obs in state.items()}


def _run_eager_against_compiled(tmp_path, case: str) -> subprocess.CompletedProcess:
    """The reproducer of ``case`` that runs it eager and compiled (``+compile``), run."""
    script = tmp_path / "r.py"
    script.write_text(torch_script(load_case(CASES / case), None, ("plain", "compile")), encoding="utf-8")
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)


def test_a_compiled_op_is_a_compiled_function_of_its_variables_in_the_transcript():
    tx = _run("candle_flip_of_a_strided_tensor_fails.toml", "cpu+compile")["transcript"]
    decorator = f"@torch.compile({', '.join(f'{k}={v!r}' for k, v in COMPILE_VARIANTS['compile'].items())})"
    assert tx["ops"][0] == [
        decorator,
        "def compiled(w):",
        "    t = w.transpose(-2, -1)",
        "    return t",
        "t = compiled(w)",
    ]
    assert tx["ops"][1][1:] == ["def compiled2(t):", "    f = t.flip(0)", "    return f", "f = compiled2(t)"]
    # the model is made as in eager torch: the prologue is not compiled
    assert tx["prologue"] == _run("candle_flip_of_a_strided_tensor_fails.toml", "cpu")["transcript"]["prologue"]


def test_a_step_runs_as_in_eager_torch():
    eager = _run("gradient_accumulation_sums_two_passes.toml", "cpu")
    compiled = _run("gradient_accumulation_sums_two_passes.toml", "cpu+compile")
    assert compiled["transcript"]["ops"] == eager["transcript"]["ops"]
    assert _final(compiled) == _final(eager)


def test_one_compiled_function_serves_every_program_whose_line_differs_only_in_its_values():
    def write(values):
        program = Program(W, check_program(W, [{"op": "write", "target": "w", "value": values}]))
        request = {"type": "run", "id": 1, "device": "cpu+compile", "program": program.to_wire(), "transcript": True}
        trace = named_observations(handle(TorchProbe(), json.dumps(request).encode()))
        assert _final(trace)["w"] == values
        return trace["transcript"]["ops"][0]

    first = write([5.0, 6.0])
    before = compiled_template.cache_info()
    second = write([7.0, 8.0])
    after = compiled_template.cache_info()
    assert after.misses == before.misses and after.hits == before.hits + 1
    # the values are the call's argument, the function the same
    assert (
        first[1:-1]
        == second[1:-1]
        == ["def compiled(w, value0):", "    with torch.no_grad():", "        w.copy_(value0)"]
    )
    assert first[-1] == "compiled(w, torch.tensor([5.0, 6.0]))"
    assert second[-1] == "compiled(w, torch.tensor([7.0, 8.0]))"


def test_the_batch_norm_candidate_gives_the_values_passed_when_compiled(tmp_path):
    """The candidate ``torch_batch_norm_normalizes_an_input_it_updated``: a training
    ``BatchNorm1d`` whose input is a view of its own ``running_var``. Eager torch updates the
    running variance in place and then normalizes the updated input (-158.11); compiled, the
    forward is functionalized, reads the input before the update, and gives 0, what the values
    passed give. The reproducer of the variant finding runs both and exits 1."""
    eager, compiled = _final(_run(BATCH_NORM, "cpu")), _final(_run(BATCH_NORM, "cpu+compile"))
    assert eager["s1"] == [pytest.approx(-158.11388)] * 2
    assert compiled["s1"] == [0.0, 0.0]
    assert compiled["n0.running_var"] == eager["n0.running_var"] == [0.5]
    r = _run_eager_against_compiled(tmp_path, BATCH_NORM)
    assert r.returncode == 1 and "the divergence shows: ['s1'] differ" in r.stdout, r.stdout + r.stderr


def test_a_write_that_compiled_code_makes_without_a_version_bump_is_observed():
    """AOTAutograd applies a mutation made under no_grad without bumping the version counters
    of the tensors it writes (eager torch bumps them). The session's observations are keyed by
    version counters, so after a compiled op every name is read again: here a row copied from
    the parameter into its checkpoint entry, which is over the parameter's storage."""
    w = (TensorDecl("w", "param", (2,), (0.0, 1.0)),)
    ops = [{"op": "save", "name": "c"}, {"op": "assign", "target": "c.w", "source": "w", "index": 1, "source_index": 0}]
    program = Program(w, check_program(w, ops))
    finals = {}
    for device in ("cpu", "cpu+compile"):
        request = {"type": "run", "id": 1, "device": device, "program": program.to_wire()}
        finals[device] = _final(named_observations(handle(TorchProbe(), json.dumps(request).encode())))
    assert finals["cpu"] == finals["cpu+compile"] == {"w": [0.0, 0.0], "c.w": [0.0, 0.0]}


def test_a_reproducer_of_an_op_that_fails_only_when_compiled_exits_1_naming_the_op(tmp_path):
    r = _run_eager_against_compiled(tmp_path, "torch_compile_refuses_a_fill_of_an_expanded_view.toml")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "the divergence shows: ['p0', 's0'] differ; ops [] fail without compile, [1] with it" in r.stdout
    assert "op 1: error: BackendCompilerFailed" in r.stdout


def test_a_reproducer_whose_compiled_run_fails_before_binding_a_name_compares_the_rest(tmp_path):
    # The compiled forward fails, so `y` is bound in the eager run only: the failure is the
    # divergence, and the names both runs bound are compared.
    r = _run_eager_against_compiled(tmp_path, "torch_compile_forward_of_a_chunk_after_a_step_is_refused.toml")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "the divergence shows: [] differ; ops [] fail without compile, [2] with it" in r.stdout
