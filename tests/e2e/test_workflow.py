"""The nightly workflow and the Makefile agree with what aliasfuzz writes.

``.github/workflows/nightly.yml`` reads ``reports/latest``, which ``make fuzz`` maintains (the
``link_latest`` recipe, also ``make latest RUN=...``). These tests run the workflow's junit step
verbatim against a run folder written by a real short campaign, and the Makefile's recipes against
temporary folders. Nothing here builds, installs or touches the checkout's ``reports/``.

The tests of this subject that run in-process are in tests/unit/test_workflow.py.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli
from tests.support.workflow import MAKE, make, step

needs_make = pytest.mark.skipif(MAKE is None, reason="make is not installed")


# ------------------------------------------------------------------------------------------------
# (a) The junit step, verbatim, against a real run folder.


@pytest.fixture(scope="module")
def checkout_like(tmp_path_factory) -> Path:
    """A folder laid out as the workflow's checkout after `make fuzz`: `.venv` (this one),
    `reports/run-x/` from a real short campaign, and `reports/latest -> run-x`."""
    root = tmp_path_factory.mktemp("checkout")
    (root / ".venv").symlink_to(ROOT / ".venv")
    run = root / "reports" / "run-x"
    r = run_cli(
        "fuzz", "--targets", "torch:cpu", "--max-programs", "16", "--seed", "1", "--profile", "quick", "--out", str(run)
    )
    assert r.returncode in (0, 1), r.stdout + r.stderr
    assert (run / "findings.json").is_file()
    (root / "reports" / "latest").symlink_to("run-x")
    return root


def _run_step(script: str, cwd: Path) -> tuple[subprocess.CompletedProcess, Path]:
    """A `run:` block as GitHub Actions runs it on Linux and macOS (`bash -e` with pipefail)."""
    output = cwd / "github-output"
    output.write_text("")
    env = {**os.environ, "GITHUB_OUTPUT": str(output), "PYTHONPATH": str(ROOT)}
    r = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    return r, output


@pytest.mark.skipif(not (ROOT / ".venv" / "bin" / "python").exists(), reason="no .venv: run `make test`")
def test_junit_step_writes_junit_xml_for_the_latest_run(checkout_like):
    script = step("linux-cpu", "junit")["run"]
    r, output = _run_step(script, checkout_like)
    assert r.returncode == 0, r.stdout + r.stderr
    junit = checkout_like / "reports" / "run-x" / "junit.xml"
    assert junit.is_file()
    root = ET.parse(junit).getroot()
    assert root.tag == "testsuites" and root.find("testsuite") is not None
    # One target: nothing to compare, no finding, and the step says so to the next one.
    assert root.get("failures") == "0"
    assert output.read_text().splitlines() == ["failures=0"]


def test_history_lists_the_latest_run_by_its_own_name(checkout_like):
    r = run_cli("report", "--history", str(checkout_like / "reports"))
    assert r.returncode == 0, r.stderr
    page = (checkout_like / "reports" / "history.html").read_text(encoding="utf-8")
    assert 'href="run-x/report.html"' in page and 'href="latest/' not in page


def test_recheck_step_records_every_root_cause_and_says_nothing_changed(checkout_like):
    # The real recheck over the bundled baseline on every target (a few seconds), into the store
    # the campaign of `checkout_like` recorded itself in.
    r, output = _run_step(step("linux-cpu", "recheck")["run"], checkout_like)
    assert r.returncode == 0, r.stdout + r.stderr
    assert output.read_text().splitlines() == ["changed=0", "regressed=0"]
    text = (checkout_like / "reports" / "latest" / "recheck.txt").read_text()
    assert "0 changed since the last recheck" in text and "still shows        candle-clone-shares-storage" in text
    store = checkout_like / "reports" / "triage.sqlite"
    assert sqlite3.connect(store).execute("SELECT COUNT(*) FROM rechecks").fetchone()[0] >= 50


def test_recheck_step_says_changed_when_a_cause_came_back(checkout_like):
    # An earlier recheck that found the entry gone: tonight it shows again, a change to look at.
    store = checkout_like / "reports" / "triage.sqlite"
    with sqlite3.connect(store) as db:
        db.execute(
            "INSERT INTO rechecks VALUES ('candle-clone-shares-storage', '9999-01-01T00:00:00.000000Z', "
            "'no longer shows', '{}', '[]')"
        )
    r, output = _run_step(step("linux-cpu", "recheck")["run"], checkout_like)
    assert r.returncode == 0, r.stdout + r.stderr  # the step reports; the last step fails the run
    assert output.read_text().splitlines() == ["changed=1", "regressed=0"]
    assert "changed: candle-clone-shares-storage (no longer shows -> still shows)" in r.stdout


@pytest.mark.skipif(not (ROOT / ".venv" / "bin" / "python").exists(), reason="no .venv: run `make test`")
def test_junit_step_fails_with_one_line_without_a_latest_run(tmp_path):
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    (tmp_path / "reports").mkdir()
    r, output = _run_step(step("linux-cpu", "junit")["run"], tmp_path)
    assert r.returncode != 0
    assert "no run folder at reports/latest" in r.stdout
    assert output.read_text() == ""


# ------------------------------------------------------------------------------------------------
# (b) The Makefile's recipes.


@needs_make
def test_make_latest_points_reports_latest_at_the_run_folder(tmp_path):
    reports = tmp_path / "reports"
    for name in ("run-a", "run-b"):
        (reports / name).mkdir(parents=True)
    latest = reports / "latest"

    r = make("latest", f"RUN={reports / 'run-a'}")
    assert r.returncode == 0, r.stderr
    assert latest.is_symlink() and os.readlink(latest) == "run-a"  # relative: the folder can move

    (reports / "run-a" / "findings.json").write_text("[]")
    r = make("latest", f"RUN={reports / 'run-b'}/")  # replaced, not followed into run-a; a trailing / is fine
    assert r.returncode == 0, r.stderr
    assert os.readlink(latest) == "run-b"
    assert sorted(p.name for p in (reports / "run-a").iterdir()) == ["findings.json"]
    assert sorted(p.name for p in reports.iterdir()) == ["latest", "run-a", "run-b"]  # no latest.tmp left


@needs_make
def test_make_latest_refuses_a_missing_run_folder_and_keeps_the_link(tmp_path):
    reports = tmp_path / "reports"
    (reports / "run-a").mkdir(parents=True)
    (reports / "latest").symlink_to("run-a")
    r = make("latest", f"RUN={reports / 'run-gone'}")
    assert r.returncode != 0
    assert "no such run folder" in r.stderr
    assert os.readlink(reports / "latest") == "run-a"
    r = make("latest")  # RUN defaults to a new timestamp in the Makefile: refused, not guessed
    assert r.returncode != 0 and "give RUN=" in r.stderr


# TEST DOUBLE: a stand-in `aliasfuzz` (in a stand-in VENV) that writes the files a campaign run
# folder starts with and exits with $FAKE_STATUS, so the `make fuzz` recipe's own logic (link,
# history, exit status) is tested without a campaign; `-o probes` skips the probe build.
FAKE_ALIASFUZZ = """#!/bin/sh
echo "$*" >> "$(dirname "$0")/../calls"
if [ "$1" = fuzz ]; then
    while [ $# -gt 0 ]; do [ "$1" = --out ] && out=$2; shift; done
    [ "$FAKE_STATUS" = 2 ] && exit 2
    mkdir -p "$out" && echo '{}' > "$out/campaign.json" && echo '[]' > "$out/findings.json"
    exit "$FAKE_STATUS"
fi
"""


@needs_make
@pytest.mark.parametrize(
    "status, make_ok, linked", [(0, True, True), (1, True, True), (2, False, False), (3, False, True)]
)
def test_make_fuzz_links_reports_latest_to_the_run_it_wrote(tmp_path, status, make_ok, linked):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    fake = venv / "bin" / "aliasfuzz"
    fake.write_text(FAKE_ALIASFUZZ)
    fake.chmod(0o755)
    reports = tmp_path / "reports"
    (reports / "run-old").mkdir(parents=True)
    (reports / "latest").symlink_to("run-old")
    run = reports / "run-new"

    r = make("-o", "probes", "fuzz", f"VENV={venv}", f"RUN={run}", env={"FAKE_STATUS": str(status)})
    assert (r.returncode == 0) == make_ok, r.stdout + r.stderr
    assert os.readlink(reports / "latest") == ("run-new" if linked else "run-old")
    calls = (venv / "calls").read_text().splitlines()
    assert calls[0] == f"fuzz --budget 2m --profile quick --seed 1 --out {run}"
    assert calls[1:] == ([f"report --history {reports}/"] if linked else [])


@needs_make
@pytest.mark.parametrize("seed, passed", [("7", "--seed 7 "), ("random", "")])
def test_make_fuzz_seed_is_fixed_unless_asked_for_a_random_one(tmp_path, seed, passed):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    fake = venv / "bin" / "aliasfuzz"
    fake.write_text(FAKE_ALIASFUZZ)
    fake.chmod(0o755)
    run = tmp_path / "reports" / "run-new"
    r = make("-o", "probes", "fuzz", f"VENV={venv}", f"RUN={run}", f"SEED={seed}", env={"FAKE_STATUS": "0"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert (venv / "calls").read_text().splitlines()[0] == f"fuzz --budget 2m --profile quick {passed}--out {run}"


def test_reports_latest_is_not_tracked():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    for path in ("reports/latest", "reports/latest.tmp"):
        r = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", path], capture_output=True, text=True)
        assert r.returncode == 0, f"{path} must be ignored by .gitignore"
