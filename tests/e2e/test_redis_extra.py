"""Redis is an optional extra (``aliasfuzz[redis]``): nothing but a shared store imports it, and
a shared store asked for without it is one line saying how to install it.

The tests of this subject that run in-process are in tests/unit/fuzzing/test_redis_extra.py.
"""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT

#: Runs the CLI with the redis package made unimportable (as on an install without the extra).
WITHOUT_REDIS = (
    "import sys; sys.modules['redis'] = None; from harness.cli import main; raise SystemExit(main(sys.argv[1:]))"
)


def test_a_campaign_without_redis_runs_and_a_shared_store_says_how_to_install_it(tmp_path):
    run = subprocess.run(
        [sys.executable, "-c", WITHOUT_REDIS, "targets", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            WITHOUT_REDIS,
            "fuzz",
            "--max-programs",
            "8",
            "--targets",
            "torch",
            "--db",
            "redis://127.0.0.1:6399/0",
            "--out",
            str(tmp_path / "run"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--db redis://127.0.0.1:6399/0" in lines[0], r.stderr
    assert "pip install 'aliasfuzz[redis]'" in lines[0], lines[0]
