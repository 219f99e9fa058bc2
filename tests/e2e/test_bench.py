"""``aliasfuzz bench --json`` on a tiny configuration: every figure the issue names is present and
consistent with the others. No speed is asserted here (figures belong to the benchmark's output,
not to a timed test); what is checked is that the benchmark measures what it says.

The tests of this subject that run in-process are in tests/unit/fuzzing/test_bench.py.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli


def test_bench_json_has_every_figure_and_they_agree(tmp_path):
    page = tmp_path / "bench.md"
    proc = run_cli(
        "bench",
        "--json",
        "--targets",
        "candle:cpu,burn:flex",
        "--programs",
        "16",
        "--chunk-size",
        "8",
        "--spawn-programs",
        "1",
        "--length-programs",
        "2",
        "--rss-programs",
        "16",
        "--repeat",
        "3",
        "--profile-top",
        "5",
        "--markdown",
        str(page),
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr
    fig = json.loads(proc.stdout)  # stdout is the JSON object alone; progress went to stderr
    assert "(a) ceiling" in proc.stderr and "two workers" in proc.stderr

    assert sorted(fig["targets"]) == ["burn:flex", "candle:cpu"]
    for key in ("ceiling_pps", "engine_pps", "spawn_pps", "engine_2workers_pps", "engine_serial_pps"):
        assert fig[key] > 0, key
    assert fig["ratio_spawn"] == fig["engine_pps"] / fig["spawn_pps"]

    # ratios between figures timed in the same round, the middle one of three
    def per_round(num: str, den: str) -> float:
        return sorted(a / b for a, b in zip(fig[num + "_runs"], fig[den + "_runs"]))[1]

    assert fig["ratio_ceiling"] == per_round("engine_pps", "ceiling_pps")
    # the limits: the strategy drawn directly, and the cores over the targets' CPU per program
    assert fig["draw_pps"] > 0 and fig["ratio_draw"] == per_round("engine_pps", "draw_pps")
    targets_ms = sum(v for k, v in fig["cpu_ms_per_program"].items() if k != "worker")
    if targets_ms > 0:
        assert fig["target_bound_pps"] == fig["cpus"] / (targets_ms / 1e3)
        assert fig["ratio_target_bound"] == fig["engine_pps"] / fig["target_bound_pps"]
        # the machine-bound limit counts the worker too, so it is below the target-bound one
        all_ms = sum(fig["cpu_ms_per_program"].values())
        assert fig["machine_bound_pps"] == pytest.approx(fig["cpus"] / (all_ms / 1e3))
        assert fig["machine_bound_pps"] <= fig["target_bound_pps"]
        assert fig["max_ratio_target_bound"] == fig["machine_bound_pps"] / fig["target_bound_pps"] <= 1
        assert fig["max_ratio_ceiling"] == fig["machine_bound_pps"] / fig["ceiling_pps"]
        assert fig["ratio_machine_bound"] == fig["engine_pps"] / fig["machine_bound_pps"]
        assert "(g) machine-bound" in proc.stderr
    else:  # 16 programs may cost the targets less than one CPU clock tick
        assert fig["target_bound_pps"] is None and fig["ratio_target_bound"] is None
        assert fig["machine_bound_pps"] is None and fig["max_ratio_ceiling"] is None
    assert "(d) direct draw" in proc.stderr and "(e) target-bound" in proc.stderr
    assert "(target >= 1.0)" in proc.stderr  # each judged ratio printed with its target
    # what the metamorphic variants cost: the same programs, with share 0, in each round
    assert fig["engine_no_variants_pps"] > 0 and "(f) metamorphic variants" in proc.stderr
    assert fig["variant_cost"] == per_round("engine_no_variants_pps", "engine_pps") - 1
    assert 0 < fig["variants_per_program"] <= 1  # the default share selects about a quarter
    assert fig["ratio_2workers"] == per_round("engine_2workers_pps", "engine_pps")
    assert set(fig["per_length"]) == {"8", "16", "32", "64"}
    assert all(v > 0 for v in fig["per_length"].values())
    assert set(fig["per_target"]) == set(fig["targets"])

    # CPU accounting: the worker and every target, and the cores one worker keeps busy
    assert set(fig["cpu_ms_per_program"]) == {"worker", *fig["targets"]}
    assert all(v >= 0 for v in fig["cpu_ms_per_program"].values())
    assert fig["cpu_ms_per_program"]["worker"] > 0  # Hypothesis and the oracle run here
    assert fig["cores_used_1worker"] > 0
    # the worker's CPU by stage: the three timed stages and the rest add up to the whole, each
    # stage measured (drawing and judging run every chunk; every target sends traces)
    stages = fig["worker_stages_ms"]
    assert set(stages) == {"drawing", "traces", "oracle", "rest", "total"}
    assert stages["drawing"] > 0 and stages["traces"] > 0 and stages["oracle"] > 0 and stages["rest"] >= 0
    assert stages["total"] >= stages["drawing"] + stages["traces"] + stages["oracle"] - 1e-9
    assert "worker CPU per program by stage" in proc.stderr
    # the worker's profile: its top functions by own time, the drawing and the oracle among the
    # functions it ranks (the main thread's), and the runner threads' reading of traces
    profile = fig["worker_profile"]
    assert len(profile) == 5 and [r["own_ms"] for r in profile] == sorted((r["own_ms"] for r in profile), reverse=True)
    assert all(r["cumulative_ms"] >= r["own_ms"] > 0 and r["calls"] > 0 for r in profile)
    assert "worker profile, top 5 by own time" in proc.stderr
    assert all(r["function"] in proc.stderr for r in profile)
    # the page: what it printed, under the command that made it
    text = page.read_text()
    assert "`aliasfuzz bench --json --targets candle:cpu,burn:flex" in text and f"--markdown {page}`" in text
    assert "worker CPU per program by stage" in text and profile[0]["function"] in text
    assert text.count("```") == 2

    # throughput figures are the middle of --repeat runs, each run kept
    for key in ("ceiling_pps", "draw_pps", "engine_pps", "engine_no_variants_pps", "engine_2workers_pps"):
        runs = fig[key + "_runs"]
        assert len(runs) == 3 and sorted(runs)[1] == fig[key], key

    # memory: the first and last sample, the worker and every probe measured
    rss = fig["rss"]
    assert rss[0]["programs"] == 0 and rss[-1]["programs"] == 16
    for point in rss:
        assert point["worker_kib"] > 0
        assert all(point[t] > 0 for t in fig["targets"])
    assert set(fig["rss_growth_kib"]) == {"worker_kib", *fig["targets"]}
    assert fig["restarts"] == {t: 0 for t in fig["targets"]}


def test_the_profile_covers_the_main_and_the_runner_threads():
    from harness.fuzzing.baseline import Baseline
    from harness.fuzzing.bench import BenchConfig, _chunks, open_bench_targets
    from harness.fuzzing.bench_stages import measure_worker_profile
    from harness.fuzzing.engine import Engine
    from harness.targets.runner import Runner

    found = open_bench_targets(["candle:cpu"])
    runner = Runner(found.targets)
    try:
        config = BenchConfig(programs=16, chunk_size=8, profile="quick")
        rows = measure_worker_profile(Engine(runner, Baseline([])), lambda d: _chunks(config, drawer=d), 10_000)
    finally:
        runner.close()
    functions = {r["function"] for r in rows}
    assert any(
        f.startswith("harness/targets/trace.py") and f.endswith("(from_wire)") for f in functions
    )  # runner threads
    assert any(f.startswith("harness/judging/oracle.py") for f in functions)  # the main thread
    assert any(f.startswith("hypothesis/") for f in functions)  # drawing, on the main thread
