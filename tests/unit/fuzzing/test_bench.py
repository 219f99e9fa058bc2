"""``aliasfuzz bench --json`` on a tiny configuration: every figure the issue names is present and
consistent with the others. No speed is asserted here (figures belong to the benchmark's output,
not to a timed test); what is checked is that the benchmark measures what it says.

The tests here run in this process (the command line through ``run_cli_in_process``), as the
unit tier requires; those that need real processes are in tests/e2e/test_bench.py.
"""

from __future__ import annotations

from tests.conftest import run_cli_in_process


def test_a_markdown_page_that_cannot_be_written_is_refused_before_the_run(tmp_path):
    proc = run_cli_in_process("bench", "--markdown", str(tmp_path / "missing" / "bench.md"), timeout=60)
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        == f"aliasfuzz: --markdown {tmp_path / 'missing' / 'bench.md'}: folder {tmp_path / 'missing'} does not exist"
    )


def test_workers_claiming_chunks_draw_every_chunk_once():
    import multiprocessing as mp

    from harness.fuzzing.bench import BenchConfig, _chunks

    config = BenchConfig(programs=40, chunk_size=8, profile="quick")  # 5 chunks
    counter = mp.get_context("spawn").Value("i", 0)
    first, second = _chunks(config, counter), _chunks(config, counter)
    claimed = [next(first), next(second), next(second)] + list(first) + list(second)
    keys = lambda chunks: sorted(p.key() for chunk in chunks for p in chunk)  # noqa: E731
    assert len(claimed) == 5
    assert keys(claimed) == keys(_chunks(config))
