"""Drawing programs (harness/fuzzing/generation.py): the direct path campaigns use, against the
``@given`` loop it replaced, and the invariants both keep: a seed gives the same programs, and a
program's recorded choices replay to that very program, so Hypothesis's shrinker starts from it.

The campaign test runs the real command line on the TEST DOUBLE fake probe (tests/fakes/), which
logs every program it is given: the programs a campaign runs depend on the seed alone, not on
the number of workers or on a kill and resume in between.

The tests of this subject that run in-process are in tests/unit/fuzzing/test_generation.py.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis.control import BuildContext
from hypothesis.internal.conjecture.data import ConjectureData

from generators.programs import get_profile, programs
from tests.conftest import run_cli
from tests.support.fake_targets import fake_probe_dir


def replay(choices: tuple, profile: str):
    data = ConjectureData.for_choices(choices)
    with BuildContext(data, wrapped_test=lambda: None):
        return data.draw(programs(get_profile(profile)))


def logged_programs(folder: Path) -> set[str]:
    return {line for f in folder.glob("*.jsonl") for line in f.read_text().splitlines()}


def test_a_campaign_runs_the_same_programs_in_any_number_of_workers_and_after_a_resume(tmp_path):
    # One target: nothing diverges, so nothing is shrunk or confirmed, and every program a probe
    # is given is one the campaign drew (or a metamorphic variant of one).
    def campaign(name: str, *args: str) -> set[str]:
        logs = tmp_path / f"log-{name}"
        logs.mkdir(exist_ok=True)
        env = fake_probe_dir(tmp_path / name, "--log-programs", str(logs))
        r = run_cli(
            "fuzz",
            "--targets",
            "candle:ref",
            "--seed",
            "11",
            "--profile",
            "quick",
            "--chunk-size",
            "16",
            "--out",
            str(tmp_path / name / "run"),
            "--no-report",
            *args,
            env=env,
        )
        assert r.returncode == 0, r.stderr
        return logged_programs(logs)

    (tmp_path / "one").mkdir(), (tmp_path / "two").mkdir(), (tmp_path / "resumed").mkdir()
    one = campaign("one", "--max-programs", "96")
    assert len(one) >= 96
    assert campaign("two", "--max-programs", "96", "--workers", "2") == one
    first = campaign("resumed", "--max-programs", "48")
    assert first < one
    assert first | campaign("resumed", "--resume", str(tmp_path / "resumed" / "run"), "--max-programs", "48") == one
