"""The torch target's transcript: the calls it made, as the source it ran, returned by a ``run``
request that asks for it (PROTOCOL.md), and the reproducer made of it.

The tests of this subject that run in-process are in tests/unit/targets/test_torch_transcript.py.
"""

from __future__ import annotations

import json
import subprocess
import sys

from harness.case.case_file import load_case
from harness.targets.driver import handle
from harness.targets.torch.reproducer import torch_script
from harness.targets.torch.session import TorchProbe
from tests.conftest import CASES


def _run(case: str, **extra) -> dict:
    program = load_case(CASES / case).to_wire()
    return handle(
        TorchProbe(), json.dumps({"type": "run", "id": 3, "device": "cpu", "program": program, **extra}).encode()
    )


def test_a_run_request_returns_the_transcript_only_when_asked():
    assert "transcript" not in _run("candle_flip_of_a_strided_tensor_fails.toml")
    tx = _run("candle_flip_of_a_strided_tensor_fails.toml", transcript=True)["transcript"]
    assert tx["prologue"] == [
        "model = nn.Module()",
        "model.w = w = nn.Parameter(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))",
    ]
    assert tx["ops"] == [["t = w.transpose(-2, -1)"], ["f = t.flip(0)"]]
    assert tx["names"] == {"w": "w", "t": "t", "f": "f"}


def test_a_failed_call_is_the_last_line_of_its_op_and_an_unsupported_op_has_none():
    reply = _run("torch_expanded_view_refuses_a_whole_write.toml", transcript=True)
    failed = [i for i, s in enumerate(reply["steps"]) if s["status"] == "error"]
    assert failed
    assert reply["transcript"]["ops"][failed[0]][-1].startswith("with torch.no_grad(): ")
    tx = _run("device_moves.toml", transcript=True)
    for step, lines in zip(tx["steps"], tx["transcript"]["ops"]):
        if step["status"] in ("unsupported", "skipped"):
            assert lines == [], (step, lines)


def test_a_keyword_name_is_a_variable_and_a_model_key_of_its_own(tmp_path):
    from tests.support.cases import HOSTILE_CASE as CASE

    case = tmp_path / "c.toml"
    case.write_text(CASE.replace("title = ", "title = 'plain' #"), encoding="utf-8")
    script = torch_script(load_case(case))
    # ``class`` is a keyword: its variable is class_, its model key case_class.
    assert "model.case_class = class_ = nn.Parameter(torch.tensor([3.0, 4.0]))" in script
    assert "model.case_class = class_ = nn.Parameter(w)" in script


def test_the_foreach_adamw_reproducer_builds_both_optimizers_in_at_most_25_lines(tmp_path):
    script = torch_script(
        load_case(CASES / "torch_foreach_adamw_with_aliased_parameters.toml"), None, ("plain", "foreach")
    )
    lines = [line for line in script.splitlines() if line.strip()]
    assert len(lines) <= 25, script
    assert "run('', foreach=False)" in script and "run('foreach: ', foreach=True)" in script
    assert (
        "torch.optim.AdamW(model.parameters(), lr=0.5, betas=(0.9, 0.999), eps=1e-08, weight_decay=0.5, **impl)"
        in script
    )
    path = tmp_path / "r.py"
    path.write_text(script, encoding="utf-8")
    r = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "the divergence shows: ['w1', 'w2'] differ" in r.stdout, r.stdout + r.stderr


def test_a_check_of_values_that_are_not_finite_is_python(tmp_path):
    """NaN and the infinities the divergence expects are written as float("nan") and the like."""
    from harness.targets.reproducer_base import Check

    program = load_case(CASES / "candle_clone_shares_storage.toml")
    script = torch_script(program, Check(1, "c", (float("nan"), float("inf"), -float("inf")), "another value"))
    assert '[float("nan"), float("inf"), -float("inf")]' in script
    path = tmp_path / "r.py"
    path.write_text(script, encoding="utf-8")
    r = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "the divergence shows" in r.stdout, r.stdout + r.stderr
