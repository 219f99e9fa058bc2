"""Run folders and finding records made by hand, and what a test reads of them."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from harness.case.case_file import load_case
from harness.fuzzing.campaign import CampaignConfig
from harness.fuzzing.replay import ReproResult
from harness.fuzzing.run_folder import RunFolder
from harness.judging.verdicts import verdicts
from harness.targets.trace import Trace
from tests.conftest import CASES, PY, ROOT


def one_line_error(r: subprocess.CompletedProcess, *fragments: str) -> str:
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("aliasfuzz: "), r.stderr
    for f in fragments:
        assert f in lines[0], (f, lines[0])
    return lines[0]


def snapshot(path: Path) -> dict[str, bytes | None]:
    """Every file under ``path`` and its bytes (folders as None)."""
    return (
        {str(p.relative_to(path)): (p.read_bytes() if p.is_file() else None) for p in sorted(path.rglob("*"))}
        if path.exists()
        else {}
    )


def state(out: Path, **changes) -> dict:
    config = CampaignConfig(
        out=str(out), seed=3, max_programs=8, targets=["candle"], profile="quick", shrink_time_s=5.0
    ).to_json()
    doc = {
        "config": config,
        "started": time.time(),
        "next_chunk": 0,
        "programs": 0,
        "elapsed_s": 0.0,
        "replayed": 0,
        "machine": {},
        "targets": {},
        "unavailable": {},
        "runs": [],
    }
    doc.update(changes)
    return doc


def run_folder_with(tmp_path: Path, n: int, name: str = "run") -> RunFolder:
    """A run folder holding ``n`` findings, written the way a campaign writes them."""
    folder = RunFolder(tmp_path / name)
    folder.create()
    folder.save_state(state(folder.path, programs=64 * n, next_chunk=n))
    records: list[dict] = []
    for i in range(n):
        folder.add_finding(
            {"signature": f"sig-{i:02d}", "kind": "device", "status": "new"},
            f"# case {i}\n",
            f"# original {i}\n",
            {"i": i},
            records,
        )
    return folder


def holder(path: Path, how: str = "lock") -> subprocess.Popen:
    """Another process that holds ``path``'s lock until killed; returns once it holds it."""
    code = (
        "import sys; from harness.fuzzing.run_folder import RunFolder\n"
        f"f = RunFolder.create_new(sys.argv[1]) if {how == 'create_new'!r} else RunFolder(sys.argv[1])\n"
        "f.acquire(); print('locked', flush=True); sys.stdin.read()\n"
    )
    proc = subprocess.Popen(
        [PY, "-c", code, str(path)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout.readline().strip() == "locked", "the holder did not get the lock"
    return proc


def unstarted_run_folder(tmp_path: Path) -> Path:
    """A run folder as a campaign leaves it before its first chunk: a resume runs chunk 0 on."""
    out = tmp_path / "run"
    folder = RunFolder(out)
    folder.create()
    config = CampaignConfig(
        out=str(out),
        seed=7,
        max_programs=16,
        targets=["candle"],
        profile="quick",
        chunk_size=8,
        shrink_time_s=2.0,
        confirm_runs=0,
    ).to_json()
    folder.save_state(state(out, config=config))
    return out


DETACH_CASE = CASES / "candle_detach_returns_itself.toml"  # one buffer b, one snapshot s = b.detach()


TARGETS = ("torch:cpu", "candle:cpu")


def _obs(v: list[float]) -> dict:
    return {
        "shape": [len(v)],
        "value": v,
        "device": "cpu",
        "requires_grad": False,
        "identity": None,
        "initialized": True,
    }


def detach_result(second_b: list[float]) -> ReproResult:
    """DETACH_CASE on two targets whose final ``b`` are [1, 2] and ``second_b``."""
    program = load_case(DETACH_CASE)
    traces = {
        tid: Trace.from_wire(
            tid, {"status": "ok", "initial": {"b": _obs(b)}, "steps": [{"status": "ok", "changed": {"s": _obs(b)}}]}
        )
        for tid, b in zip(TARGETS, ([1.0, 2.0], second_b))
    }
    return ReproResult(program, {}, traces, [], verdict_maps={t: verdicts(program, tr) for t, tr in traces.items()})


def record(n: int, **over) -> dict:
    stem = f"{n:03d}-0000000{n}"
    rec = {
        "signature": f"framework|candle:cpu~torch:cpu|identity|detach|snapshot|same~new#{n}",
        "kind": "framework",
        "aspect": "identity",
        "status": "new",
        "baseline": None,
        "targets": list(TARGETS),
        "op": "snapshot",
        "method": "detach",
        "sentence": f"finding number {n}",
        "detail": None,
        "ops_before": 1,
        "ops_after": 1,
        "seconds_to_find": 0.5,
        "shrink_seconds": 0.1,
        "shrink_complete": True,
        "shrink_runs": 3,
        "case": f"cases/{stem}.toml",
        "original_case": f"cases/{stem}.original.toml",
        "repro": f"cases/{stem}.json",
    }
    rec.update(over)
    return rec


def make_run(d: Path, records: list[dict], repro: dict | None = None) -> Path:
    """A run folder holding ``records``; each record's own case, original case and repro file
    (those under cases/) are written, the repro being ``repro`` (default: the two targets agree)."""
    (d / "cases").mkdir(parents=True)
    state = {
        "config": {"seed": 7, "profile": "quick", "budget_s": None, "max_programs": 8, "workers": 1, "db": None},
        "programs": 8,
        "elapsed_s": 2.0,
        "started": 1.7e9,
        "machine": {"cpu": "test"},
        "targets": {t: {"versions": {"fw": "1.0"}} for t in TARGETS},
        "next_chunk": 1,
        "runs": [],
        "unavailable": {},
    }
    (d / "campaign.json").write_text(json.dumps(state))
    doc = repro if repro is not None else detach_result([1.0, 2.0]).to_json()
    for r in records:
        for key in ("case", "original_case", "repro"):
            rel = r.get(key)
            if isinstance(rel, str) and rel.startswith("cases/") and not (d / rel).exists():
                (d / rel).write_text(json.dumps(doc) if key == "repro" else DETACH_CASE.read_text())
    (d / "findings.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (d / "findings.json").write_text(json.dumps(records))
    return d
