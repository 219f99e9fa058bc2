"""A Redis password is never stored or shown (``harness.urls.hide_password``): a shared campaign
run against a real ``redis-server`` that requires a password, with the password in every URL
(``--db``, ``--triage``, ``report redis://.../NAME``), leaves it in no file of the run folders,
of the triage store beside them, of a bug report, and in no line the commands print. The nightly
passes the URL from a secret and uploads ``reports/``. The findings come from the TEST DOUBLE
fake probe (tests/e2e/test_campaign.py ``fake_probe_dir``), which stands in for no framework.

The tests of this subject that run in-process are in tests/unit/test_secrets_masked.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from harness.escaping import md_text
from tests.conftest import PY, ROOT, free_port, need, run_cli
from tests.support.fake_targets import fake_probe_dir

SECRET = "s3cr3t-PASSWORD-4711"


@pytest.fixture
def locked_redis(tmp_path):
    """A real ``redis-server`` on a free loopback port that refuses every client without the
    password ``SECRET`` (``requirepass``): ``(url without the database, process)``."""
    exe = shutil.which("redis-server")
    if exe is None:
        need("redis-server", "Debian/Ubuntu: apt-get install -y redis-server; macOS: brew install redis")
    import redis

    port = free_port()
    data = tmp_path / "redis-data"
    data.mkdir()
    proc = subprocess.Popen(
        [
            exe,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--requirepass",
            SECRET,
            "--dir",
            str(data),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        client = redis.Redis(host="127.0.0.1", port=port, password=SECRET)
        deadline = time.monotonic() + 20
        while True:
            try:
                client.ping()
                break
            except Exception:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail(f"redis-server did not come up on port {port}")
                time.sleep(0.1)
        # Without the password the server answers nothing: the URLs below must carry it.
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(host="127.0.0.1", port=port).get("x")
        yield f"redis://:{SECRET}@127.0.0.1:{port}", proc
    finally:
        if proc.poll() is None:
            proc.terminate()
        proc.wait(timeout=10)


def files_holding(root: Path, text: str) -> list[str]:
    """Every file under ``root`` (hidden ones and SQLite stores included) whose bytes hold ``text``."""
    return sorted(str(p) for p in root.rglob("*") if p.is_file() and text.encode() in p.read_bytes())


def test_a_redis_password_is_in_no_file_of_a_shared_campaign_its_reports_or_its_triage_store(tmp_path, locked_redis):
    server, _proc = locked_redis
    env = {**fake_probe_dir(tmp_path), "ALIASFUZZ_BUG_DIR": str(tmp_path / "bug-reports")}
    reports = tmp_path / "reports"
    run = reports / "machine"
    r = run_cli(
        "fuzz",
        "--db",
        f"{server}/0",
        "--campaign",
        "nightly",
        "--triage",
        f"{server}/1",
        "--targets",
        "candle",
        "--profile",
        "quick",
        "--seed",
        "1",
        "--max-programs",
        "16",
        "--chunk-size",
        "8",
        "--shrink-time",
        "2",
        "--confirm",
        "0",
        "--out",
        str(run),
        env=env,
    )
    assert r.returncode == 1, r.stdout + r.stderr  # the fake probe's planted divergences: new findings
    assert "triage:" in r.stdout, r.stdout + r.stderr  # recorded in the Redis store, through a temporary copy
    merged = reports / "merged"
    m = run_cli("report", f"{server}/0/nightly", "--out", str(merged), env=env)
    assert m.returncode == 0, m.stdout + m.stderr
    for output in (r.stdout, r.stderr, m.stdout, m.stderr):
        assert SECRET not in output
    assert files_holding(tmp_path, SECRET) == []
    # The URL is still shown, its password hidden: where the corpus was is not lost.
    for folder in (run, merged):
        assert (
            json.loads((folder / "campaign.json").read_text())["config"]["db"]
            == f"redis://:***@{server.rsplit('@', 1)[1]}/0"
        )
        # report.md escapes it as Markdown text (the asterisks render as written)
        shown = md_text(f"redis://:***@{server.rsplit('@', 1)[1]}/0")
        assert f"| corpus | {shown} |" in (folder / "report.md").read_text()
        assert "redis://:***@" in (folder / "report.html").read_text()
    # A Redis store is worked on in a temporary copy of its own: no local store is made or replaced
    # (harness.triage.shared); the run folder's triage.json holds what the report shows of it.
    assert not (reports / "triage.sqlite").exists()
    assert (run / "triage.json").is_file() and (run / "report.md").is_file()


def test_a_resume_is_given_the_password_again_and_stores_it_nowhere(tmp_path, locked_redis):
    server, _proc = locked_redis
    env = fake_probe_dir(tmp_path)
    run = tmp_path / "run"
    common = ("--no-report", "--triage", str(tmp_path / "triage.sqlite"))
    r = run_cli(
        "fuzz",
        "--db",
        f"{server}/0",
        "--targets",
        "candle",
        "--profile",
        "quick",
        "--seed",
        "1",
        "--max-programs",
        "8",
        "--chunk-size",
        "8",
        "--shrink-time",
        "2",
        "--confirm",
        "0",
        "--out",
        str(run),
        *common,
        env=env,
    )
    assert r.returncode in (0, 1), r.stdout + r.stderr
    before = (run / "campaign.json").read_bytes()
    # campaign.json holds no password to reconnect with: the resume asks for it, one line, nothing changed.
    r = run_cli("fuzz", "--resume", str(run), "--max-programs", "16", *common, env=env)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "give --db with the password again" in lines[0] and "redis://:***@" in lines[0], lines
    assert (run / "campaign.json").read_bytes() == before
    # Given again, it is the same corpus (compared with the password hidden): the campaign goes on.
    r = run_cli("fuzz", "--resume", str(run), "--max-programs", "16", "--db", f"{server}/0", *common, env=env)
    assert r.returncode in (0, 1), r.stdout + r.stderr
    assert json.loads((run / "campaign.json").read_text())["programs"] > 8
    assert SECRET not in r.stdout + r.stderr and files_holding(tmp_path, SECRET) == []


# TEST DOUBLE: the report command replaced by one that raises, with the URL in its message, so
# that the crash handler's bug report (harness.cli._harness_crash, harness_errors.write_bug_report)
# is written for a command line holding a password. Only the harness's own reporting is tested.
_CRASH = f"""
import sys
import harness.cli
import harness.cli.report

def crashing_report(args):  # TEST DOUBLE
    raise RuntimeError("lost " + args.run_dir)

harness.cli.report.cmd_report = crashing_report
sys.argv = ["aliasfuzz", "report", "redis://:{SECRET}@127.0.0.1:1/0/nightly", "--out", "merged"]
sys.exit(harness.cli.main())
"""


def test_a_bug_report_hides_the_password_of_its_command_line(tmp_path):
    bugs = tmp_path / "bug-reports"
    r = subprocess.run(
        [PY, "-c", _CRASH],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "ALIASFUZZ_BUG_DIR": str(bugs), "PYTHONPATH": str(ROOT)},
    )
    assert r.returncode == 3, r.stdout + r.stderr
    (report,) = bugs.iterdir()
    text = report.read_text()
    assert "Command: `aliasfuzz report redis://:***@127.0.0.1:1/0/nightly --out merged`" in text, text
    assert "RuntimeError: lost redis://:***@127.0.0.1:1/0/nightly" in text, text
    assert SECRET not in text and SECRET not in r.stderr, r.stderr
