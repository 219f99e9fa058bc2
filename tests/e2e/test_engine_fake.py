"""The engine's own logic, on a TEST DOUBLE with one planted divergence (tests/fakes/).

The fake's ``planted`` device returns a shared buffer from ``clone``; ``ref`` copies. The engine
must find that, shrink it to its known minimal form (one param, a clone, one op that changes the
param), and give the same signature however the case is renamed, padded or re-valued.

The tests of this subject that run in-process are in tests/unit/fuzzing/test_engine_fake.py.
"""

from __future__ import annotations

import pytest

from harness.case.ir import TensorDecl
from harness.fuzzing.baseline import Baseline
from harness.fuzzing.engine import Engine
from harness.fuzzing.generation import generate
from harness.judging.oracle import compare
from harness.shrinking.minimize import canonical_names, is_one_minimal
from harness.targets.runner import Runner
from tests.fakes.targets import fake_target
from tests.support.fake_targets import PLANTED, program


@pytest.fixture(scope="module")
def fake_runner():
    r = Runner([fake_target("ref"), fake_target("planted")])
    yield r
    r.close()


def signatures(runner, p):
    return {f.signature for f in compare(p, runner.run_one(p))}


def test_planted_divergence_is_found_and_shrunk(fake_runner):
    engine = Engine(fake_runner, Baseline([]), shrink_time_s=60)
    recorded = []
    engine.process([PLANTED], recorded.append)
    # The planted clone shares its buffer (verdict) and its identity token (identity).
    assert sorted(r.finding.aspect for r in recorded) == ["identity", "verdict"]
    rec = next(r for r in recorded if r.finding.aspect == "verdict")
    assert rec.finding.kind == "device"
    assert rec.finding.aspect == "verdict" and rec.finding.method == "clone"
    assert rec.finding.targets == ("fake:planted", "fake:ref")
    assert rec.finding.sides == ("follows", "keeps")
    m = rec.minimized
    # Known minimal form: one tensor, the clone, and the op that first changes the param.
    assert len(m.tensors) == 1 and len(m.ops) == 2
    assert m.ops[0]["op"] == "snapshot" and m.ops[0]["method"] == "clone"
    assert m.ops[1]["op"] == "write" and rec.finding.op_label.startswith("write")
    assert [t.name for t in m.tensors] == ["p0"] and m.ops[0]["name"] == "s0"
    assert rec.shrink.complete and rec.shrink.ops_before == 7 and rec.shrink.ops_after == 2
    # 1-minimal: no single removal keeps the signature.
    assert is_one_minimal(m, engine.predicate(rec.finding, fake_runner.ids)) == []


def test_signature_survives_renaming_padding_and_values(fake_runner):
    base = signatures(fake_runner, PLANTED)
    assert len(base) == 2
    renamed = canonical_names(PLANTED)
    assert signatures(fake_runner, renamed) == base
    padded_ops = [
        {"op": "read", "target": "buf"},
        *PLANTED.ops[:4],
        {"op": "snapshot", "name": "extra", "of": "buf", "method": "reshape"},
        *PLANTED.ops[4:],
        {"op": "fill", "target": "buf", "value": 1.0},
    ]
    assert signatures(fake_runner, program(PLANTED.tensors, padded_ops)) == base
    revalued = program(
        [TensorDecl("w", "param", (2, 2), (8.0, -1.0, 0.5, 0.0)), PLANTED.tensors[1]],
        [*PLANTED.ops[:4], {**PLANTED.ops[4], "value": [9.0, 9.0]}, *PLANTED.ops[5:]],
    )
    assert signatures(fake_runner, revalued) == base


def test_clean_program_has_no_finding(fake_runner):
    clean = program(
        [TensorDecl("w", "param", (2,), (1.0, 2.0))],
        [{"op": "snapshot", "name": "c", "of": "w", "method": "detach"}, {"op": "step", "optimizer": "sgd", "lr": 0.5}],
    )
    assert signatures(fake_runner, clean) == set()


def test_generated_campaign_finds_the_planted_bug(fake_runner):
    engine = Engine(fake_runner, Baseline([]), shrink_time_s=30)
    recorded = []
    engine.profile = "quick"
    for chunk in range(20):
        engine.process(engine.generate(50, seed=chunk), recorded.append)
        if any(r.finding.method == "clone" and r.finding.aspect == "verdict" for r in recorded):
            break  # a clone's identity alone is found first where no write follows it
    clones = [r for r in recorded if r.finding.method == "clone" and r.finding.aspect == "verdict"]
    assert clones, [r.signature for r in recorded]
    for r in clones:
        assert r.shrink.hypothesis_runs > 0  # Hypothesis's shrinker ran first
        assert len(r.minimized.ops) == 2
        assert is_one_minimal(r.minimized, engine.predicate(r.finding, fake_runner.ids)) == []


def test_pipeline_results_equal_check_even_when_the_consumer_runs_programs(fake_runner):
    # pipeline() submits chunk k+1 before yielding chunk k; a consumer that runs programs while
    # holding chunk k (as shrinking does) must neither disturb chunk k+1's traces nor see them
    from harness.fuzzing.engine import pipeline

    a, b, c = (generate(12, seed=s, profile="quick") for s in (7, 8, 9))
    chunks = [a, b + a[:3], c]  # some programs again: the pipeline runs them once
    engine = Engine(fake_runner, Baseline([]))
    seen: set[str] = set()
    firsts = [[p for p in c if p.key() not in seen and not seen.add(p.key())] for c in chunks]
    assert sum(map(len, firsts)) == sum(map(len, chunks)) - 3
    expected = [[(p.key(), sorted(f.signature for f in fs)) for p, _t, fs in engine.check(c)] for c in firsts]
    got = []
    for _programs, results in pipeline(engine, iter(chunks)):
        assert signatures(fake_runner, PLANTED)  # the targets, used mid-pipeline
        got.append([(p.key(), sorted(f.signature for f in fs)) for p, _t, fs in results])
    assert got == expected


def test_the_engine_runs_a_program_once(fake_runner, monkeypatch):
    from harness.fuzzing import engine as engine_module
    from harness.fuzzing.engine import pipeline

    engine = Engine(fake_runner, Baseline([]))
    first = engine.generate(12, seed=7)
    again = engine.generate(12, seed=7)  # the same chunk drawn twice (choices recorded both times)
    runs = [programs for programs, _results in pipeline(engine, [first, again])]
    assert [p.key() for p in runs[0]] == list(dict.fromkeys(p.key() for p in first))
    assert runs[1] == [] and engine.repeats_skipped == 24 - len(runs[0])
    engine.forget(runs[0])
    assert engine.choices == {}  # a skipped program's recorded choices do not stay behind
    # The memory is bounded: past RAN_LIMIT it starts afresh, and a program runs again.
    monkeypatch.setattr(engine_module, "RAN_LIMIT", 2)
    assert engine.unseen(first[:1]) == first[:1]


def test_pipeline_stopped_early_leaves_no_batch_running(fake_runner):
    from harness.fuzzing.engine import PIPELINE_AHEAD, pipeline

    engine = Engine(fake_runner, Baseline([]))
    chunks = iter([generate(6, seed=s, profile="quick") for s in range(1, 3 + PIPELINE_AHEAD)])
    stream = pipeline(engine, chunks)
    next(stream)  # chunk 1 held; the next PIPELINE_AHEAD chunks are queued on the targets
    assert fake_runner._flight.collect is not None
    stream.close()  # the consumer stops (a campaign's budget ran out)
    assert fake_runner._flight.collect is None
    assert next(chunks, None) is not None  # the chunk after those was never drawn
    assert next(chunks, None) is None
    # the probes answer the next batch with its own traces
    assert signatures(fake_runner, PLANTED)


def test_runner_collect_is_idempotent_and_a_second_batch_queues_behind_the_first(fake_runner):
    a, b = generate(5, seed=21, profile="quick"), generate(5, seed=22, profile="quick")
    wait_a = fake_runner.submit(a)
    wait_b = fake_runner.subset(fake_runner.ids).submit(b)  # a subset shares the processes
    got_b, got_a = wait_b(), wait_a()
    assert wait_a() is got_a
    assert [sorted(t) for t in got_a] == [sorted(fake_runner.ids)] * 5

    def observed(results):  # what a trace says, less its timing
        return [{k: {**v.to_json(), "elapsed_us": None} for k, v in t.items()} for t in results]

    assert observed(got_a) == observed(fake_runner.run(a))
    assert observed(got_b) == observed(fake_runner.run(b))


def test_a_batchs_traces_are_freed_without_the_cyclic_collector(fake_runner):
    import gc
    import weakref

    gc.collect()
    gc.disable()
    try:
        wait = fake_runner.submit(generate(4, seed=23, profile="quick"))
        results = wait()
        trace = weakref.ref(next(iter(results[0].values())))
        del wait, results
        fake_runner.run_one(PLANTED)  # the runner's last batch is another one now
        assert trace() is None  # freed by reference counting: no cycle held it
    finally:
        gc.enable()


def test_the_pipeline_sets_the_collector_for_its_run_and_restores_it(fake_runner):
    import gc

    from harness.collector import YOUNG_THRESHOLD
    from harness.fuzzing.engine import pipeline

    before = gc.get_threshold()
    engine = Engine(fake_runner, Baseline([]))
    inside = []
    for _ in pipeline(engine, [generate(4, seed=s, profile="quick") for s in (24, 25)]):
        inside.append((gc.get_threshold()[0], gc.get_freeze_count() > 0))
    assert inside == [(max(YOUNG_THRESHOLD, before[0]), True)] * 2
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_a_variant_runs_only_the_programs_with_an_op_it_differs_on():
    # The planted device declared as a variant differing only on `step`: the runner sends it the
    # programs with a step, the oracle compares it only there, and `every_target` sends it all.
    variant = fake_target("ref+planted", differs_on=("step",))
    runner = Runner([fake_target("ref"), variant])
    try:
        no_step = PLANTED.with_ops(op for op in PLANTED.ops if op["op"] != "step")
        results = runner.run([PLANTED, no_step])
        assert list(results[0]) == ["fake:ref", "fake:ref+planted"]
        assert list(results[1]) == ["fake:ref"]
        assert compare(PLANTED, results[0])  # the planted clone, seen through the step
        assert compare(no_step, results[1]) == []  # not run there, so nothing is compared
        everywhere = runner.run_one(no_step, every_target=True)
        assert list(everywhere) == ["fake:ref", "fake:ref+planted"]
        assert compare(no_step, everywhere)  # the declaration was the test's, not the probe's
        # without its plain device beside it, a variant runs everything (it is compared with others)
        alone = runner.subset(["fake:ref+planted"]).run([PLANTED, no_step])
        assert [list(t) for t in alone] == [["fake:ref+planted"], ["fake:ref+planted"]]
    finally:
        runner.close()


def test_known_findings_come_after_new_ones_and_are_left_unshrunk_unless_asked(fake_runner):
    from harness.fuzzing.baseline import KnownDivergence

    # The oracle lists the planted clone's verdict finding before its identity finding; with the
    # verdict one known, the new identity finding must be shrunk (and reported) first.
    known = Baseline([KnownDivergence("planted-clone", "test", "none.toml", aspect="verdict")])
    as_found = []
    Engine(fake_runner, known, shrink_time_s=60, shrink_known=False).process([PLANTED], as_found.append)
    assert [(r.finding.aspect, r.status) for r in as_found] == [("identity", "new"), ("verdict", "known")]
    new, old = as_found
    assert new.shrink is not None and len(new.minimized.ops) < len(PLANTED.ops)
    assert old.shrink is None and old.minimized is old.original is PLANTED and old.baseline == "planted-clone"

    shrunk = []
    Engine(fake_runner, known, shrink_time_s=60, shrink_known=True).process([PLANTED], shrunk.append)
    assert [(r.finding.aspect, r.status) for r in shrunk] == [("identity", "new"), ("verdict", "known")]
    assert shrunk[1].shrink is not None and len(shrunk[1].minimized.ops) == 2
