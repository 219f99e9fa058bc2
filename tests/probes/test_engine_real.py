"""The engine on the real frameworks: a short CPU campaign finds porting hazards between torch and
candle and between torch and burn, and every finding it shrinks is 1-minimal."""

from __future__ import annotations

import json

from harness.case.case_file import load_case
from harness.fuzzing.baseline import load_baseline
from harness.fuzzing.engine import Engine
from harness.fuzzing.generation import generate
from harness.shrinking.minimize import is_one_minimal
from harness.targets.runner import in_share
from tests.conftest import CASES, run_cli


def test_short_campaign_finds_torch_candle_and_torch_burn_divergences(runner):
    sub = runner.subset(["torch:cpu", "candle:cpu", "burn:flex"])
    engine = Engine(sub, load_baseline(), shrink_time_s=20, profile="quick")
    recorded = []
    pairs = set()
    for chunk in range(8):
        engine.process(engine.generate(32, seed=100 + chunk), recorded.append)
        pairs = {r.finding.targets for r in recorded if r.finding.kind == "framework"}
        if {("candle:cpu", "torch:cpu"), ("burn:flex", "torch:cpu")} <= pairs and len(recorded) >= 4:
            break
    assert ("candle:cpu", "torch:cpu") in pairs, [r.signature for r in recorded]
    assert ("burn:flex", "torch:cpu") in pairs, [r.signature for r in recorded]
    # Time from the start to each finding. A chunk reports its new findings (shrunk first) before
    # its known ones, so the times rise within each of the two groups.
    for known in (False, True):
        times = [r.seconds_to_find for r in recorded if (r.status == "known") == known]
        assert times == sorted(times) and all(t >= 0 for t in times), (known, times)
    checked = 0
    for r in recorded:
        assert r.signature == r.finding.signature
        assert len(r.minimized.ops) <= len(r.original.ops)
        if not r.shrink.complete:
            continue
        # 1-minimal: no single op or tensor can be removed without losing the signature
        shows = engine.predicate(r.finding, [t for t in r.finding.targets if t != "-"])
        assert shows([r.minimized]) == [True], r.signature
        assert is_one_minimal(r.minimized, shows) == [], r.signature
        checked += 1
    assert checked >= 2


def test_the_foreach_variant_runs_only_programs_with_a_step(runner):
    # torch:cpu+foreach declares it differs only on `step`: a campaign does not run it on a
    # program without one (its trace would be torch:cpu's), and a replay runs it everywhere.
    sub = runner.subset(["torch:cpu", "torch:cpu+foreach"])
    with_step = load_case(CASES / "padded_clone_20ops.toml")
    assert any(op["op"] == "step" for op in with_step.ops)
    no_step = with_step.with_ops([op for op in with_step.ops if op["op"] != "step"])
    got = sub.run([no_step, with_step])
    assert list(got[0]) == ["torch:cpu"]
    assert list(got[1]) == ["torch:cpu", "torch:cpu+foreach"]
    assert list(sub.run_one(no_step, every_target=True)) == ["torch:cpu", "torch:cpu+foreach"]
    for traces in got:
        assert all(tr.ok for tr in traces.values())


def test_the_compile_variant_runs_only_its_share_of_the_programs_it_is_needed_for(runner):
    # A profile's ``target_shares`` give torch:cpu+compile a share of the programs with an op it
    # compiles: exactly those ``in_share`` picks, and a replay runs it everywhere.
    sub = runner.subset(["torch:cpu", "torch:cpu+compile"])
    compiled = next(t for t in sub.targets if t.id == "torch:cpu+compile")
    programs = generate(40, 5, "quick")
    got = sub.run(programs, shares={"compile": 0.25})
    ran = [i for i, traces in enumerate(got) if "torch:cpu+compile" in traces]
    want = [i for i, p in enumerate(programs) if compiled.needed(p) and in_share(p, 0.25)]
    assert ran == want and 0 < len(ran) < len(programs)
    assert all("torch:cpu" in traces for traces in got)
    assert list(sub.run_one(programs[0], every_target=True)) == ["torch:cpu", "torch:cpu+compile"]


def test_a_device_with_a_share_runs_that_share_of_the_programs_where_another_target_runs(runner):
    # A profile's ``target_shares`` give a costly device (burn:wgpu) a share of every program,
    # keyed by its target id: burn:ndarray stands in for it here, on the same runner code.
    sub = runner.subset(["burn:flex", "burn:ndarray"])
    programs = generate(40, 6, "quick")
    got = sub.run(programs, shares={"burn:ndarray": 0.25})
    ran = [i for i, traces in enumerate(got) if "burn:ndarray" in traces]
    assert ran == [i for i, p in enumerate(programs) if in_share(p, 0.25)] and 0 < len(ran) < len(programs)
    assert all("burn:flex" in traces for traces in got)
    # A replay runs it everywhere, and so does a campaign on that device alone.
    assert list(sub.run_one(programs[0], every_target=True)) == ["burn:flex", "burn:ndarray"]
    alone = runner.subset(["burn:ndarray"]).run(programs[:8], shares={"burn:ndarray": 0.25})
    assert all(list(traces) == ["burn:ndarray"] for traces in alone)


def test_minimize_cli_shrinks_a_padded_20_op_case(tmp_path):
    case = CASES / "padded_clone_20ops.toml"
    assert len(load_case(case).ops) == 20
    out = tmp_path / "min.toml"
    sig = "framework|candle:cpu~torch:cpu|verdict|clone|step|follows~keeps"
    result = run_cli("minimize", str(case), "--targets", "torch:cpu,candle:cpu", "--signature", sig, "--out", str(out))
    assert result.returncode == 1, result.stderr  # a divergence was kept, as every command says
    assert "20 -> 2 ops" in result.stdout and "(complete)" in result.stdout
    minimal = load_case(out)
    assert [op["op"] for op in minimal.ops] == ["snapshot", "step"]
    assert minimal.ops[0]["method"] == "clone" and [t.name for t in minimal.tensors] == ["p0"]
    assert minimal.meta["signature"] == sig
    # the minimized case replays: repro shows the same divergence
    replay = run_cli("repro", str(out), "--targets", "torch:cpu,candle:cpu", "--json")
    assert replay.returncode == 1
    assert sig in [d["signature"] for d in json.loads(replay.stdout)["divergences"]]


def test_the_seed_11_crash_case_is_judged_on_every_real_target(runner):
    # The program that ended `fuzz --budget 240s --seed 11` with an IndexError in the oracle,
    # as the campaign's containment shrank it: now it shows only the known candle clone identity.
    from harness.fuzzing.baseline import load_baseline
    from harness.judging.harness_errors import safe_compare

    program = load_case(CASES / "adamw_tiny_step_on_a_uniform_lazy.toml")
    findings = safe_compare(program, runner.run_one(program))
    assert all(f.kind != "harness-error" for f in findings), [f.detail for f in findings]
    baseline = load_baseline()
    assert findings and all(baseline.match(f) is not None for f in findings)
