"""Building and running a finding's reproducers (cargo projects, torch scripts), and comparing what
they print with what the target observed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from harness.case.case_file import load_case
from harness.paths import cargo_target_dir, probe_binary
from harness.targets.reproducers import parse_output, prepare_cargo_build, trace_states, write_project
from tests.conftest import need, repro_json_alone


def compare_printed(printed: dict, expected: dict, label: str, ops_status: list[dict]) -> None:
    assert None in printed, f"{label}: no initial line"
    for step, names in expected.items():
        if step is not None and ops_status[step].get("status") != "ok":
            continue
        got = printed.get(step, {})
        for name, want in names.items():
            assert name in got, f"{label}: op {step}: {name} not printed"
            have = got[name]
            if isinstance(want, str) or isinstance(have, str):
                assert have == want, f"{label}: op {step}: {name}: {have} != {want}"
                continue
            assert len(have) == len(want) and all(abs(a - b) <= 1e-5 * max(1.0, abs(b)) for a, b in zip(have, want)), (
                f"{label}: after op {step}: {name} printed {have}, the target observed {want}"
            )


def cargo_reproducer(framework: str, case: Path, target: str, tmp_path: Path):
    if not probe_binary(f"{framework}_probe").exists():
        need(f"the {framework} probe", "build the probes with `make probes`")
    if shutil.which("cargo") is None:
        need("cargo", "install Rust from https://rustup.rs")
    doc = repro_json_alone(case, target)
    tj = doc["targets"][target]
    assert tj["status"] == "ok", tj
    # unify_with_probes: the probe workspace's dependency set, so the shared target dir's compiled
    # candle/burn are reused and only the reproducer crate is built (seconds, not ~13 minutes).
    proj = write_project(load_case(case), framework, tmp_path / f"repro-{framework}", unify_with_probes=True)
    prepare_cargo_build(proj)
    env = {**os.environ, "CARGO_TARGET_DIR": str(cargo_target_dir())}
    r = subprocess.run(["cargo", "run", "-q"], cwd=proj, env=env, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr[-4000:]
    assert "warning" not in r.stderr, f"the generated {framework} code compiles with warnings:\n{r.stderr[-4000:]}"
    compare_printed(parse_output(r.stdout), trace_states(tj), f"{framework} reproducer of {case.name}", tj["ops"])
    return r.stdout, doc


#: Runs each torch script given on the command line in one interpreter (torch imported once),
#: each in a namespace of its own as ``python repro.torch.py`` would, and prints, as JSON, what
#: each printed and the error it ended with (None: it ran to its end).
_RUN_SCRIPTS = r"""
import contextlib, io, json, sys, traceback
out = {}
for path in sys.argv[1:]:
    buf, error = io.StringIO(), None
    try:
        with contextlib.redirect_stdout(buf):
            exec(compile(open(path, encoding="utf-8").read(), path, "exec"), {"__name__": "__main__"})
    except BaseException:
        error = traceback.format_exc()[-3000:]
    out[path] = [buf.getvalue(), error]
print(json.dumps(out))
"""


def run_torch_scripts(scripts: list[Path], cwd: Path) -> dict[str, tuple[str, str | None]]:
    """What each torch script printed, and the error it ended with (None when it ran to its end),
    by its path as a string: all of them run in one Python process, so torch is imported once
    rather than once per script."""
    run = subprocess.run(
        [sys.executable, "-c", _RUN_SCRIPTS, *map(str, scripts)], capture_output=True, text=True, timeout=900, cwd=cwd
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return {path: (printed, error) for path, (printed, error) in json.loads(run.stdout).items()}
