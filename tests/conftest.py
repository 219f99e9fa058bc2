"""Shared fixtures: real targets, started once per test session."""

from __future__ import annotations

import io
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path
from typing import NoReturn

import pytest

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "cases"
PY = sys.executable


def run_cli(*args: str, env: dict | None = None, timeout: float = 600, cwd=ROOT) -> subprocess.CompletedProcess:
    """Runs the real ``aliasfuzz`` command line in a subprocess."""
    return subprocess.run(
        [PY, "-m", "harness.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def run_cli_in_process(
    *args: str, env: dict | None = None, timeout: float | None = None, cwd=ROOT
) -> subprocess.CompletedProcess:
    """Runs the ``aliasfuzz`` command line's ``main`` in this process, as the unit tier does:
    the same exit status and the same standard output and error as ``run_cli``, with no process
    started. ``env`` is set and ``cwd`` entered for the call alone; ``timeout`` is accepted for
    ``run_cli``'s signature and not enforced."""
    from harness.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    os.environ.update(env or {})
    os.chdir(cwd)
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                status = main(list(args))
            except SystemExit as e:  # argparse: a usage error
                status = e.code if isinstance(e.code, int) else 2
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    return subprocess.CompletedProcess(["aliasfuzz", *args], status, out.getvalue(), err.getvalue())


def repro_json_alone(case, target: str) -> dict:
    """The ``repro --json`` document of ``case`` on ``target`` alone. One target is no
    comparison (exit 2, one line saying so) unless the case is metamorphic (compared with its run
    without the inert ops); the trace is in the JSON either way."""
    r = run_cli("repro", "--json", "--targets", target, str(case))
    alone = r.returncode == 2 and [f"only {target} ran the case" in line for line in r.stderr.splitlines()] == [True]
    assert r.returncode in (0, 1) or alone, r.stderr
    return json.loads(r.stdout)


TIERS = {
    "unit": "the harness's own logic in-process: no process, network, service or framework (under a minute)",
    "probes": "the real frameworks: the Rust probes and the torch session",
    "e2e": "whole runs in real processes: the command line, campaigns, fake probes, Redis, Chromium, make",
}


def pytest_configure(config):
    for tier, what in TIERS.items():
        config.addinivalue_line("markers", f"{tier}: {what}")


def pytest_collection_modifyitems(items):
    """Marks each test with its tier, the folder under tests/ it lives in (``pytest -m unit``)."""
    for item in items:
        tier = item.path.relative_to(ROOT / "tests").parts[0]
        if tier in TIERS:
            item.add_marker(tier)


@pytest.fixture(scope="session", autouse=True)
def bug_reports_in_a_temporary_folder(tmp_path_factory):
    """Bug reports of aliasfuzz itself (``harness_errors.write_bug_report``) that a test provokes
    go to a temporary folder, never into the checkout's reports/ (subprocesses inherit it)."""
    os.environ["ALIASFUZZ_BUG_DIR"] = str(tmp_path_factory.mktemp("bug-reports"))


@pytest.fixture(scope="session")
def all_targets():
    """Every target this machine offers, opened once. Fails (never skips) when a probe is missing:
    `make test` builds them first."""
    from harness.targets.registry import discover

    found = discover()
    if found.unavailable:
        found.close()
        pytest.fail(f"targets unavailable: {found.unavailable} (run `make probes`)")
    yield found
    found.close()


@contextmanager
def targets_runner(ids: tuple[str, ...], env: dict[str, str] | None = None):
    """A ``Runner`` on the targets ``ids`` alone (the other probes are not started; ``env`` for
    theirs), closed on exit. Fails (never skips) when one is missing: `make test` builds every
    probe first."""
    from harness.targets.registry import discover
    from harness.targets.runner import Runner

    found = discover(list(ids), env=env)
    missing = sorted(set(ids) - {t.id for t in found.targets})
    if missing:
        found.close()
        pytest.fail(f"targets missing here: {missing} {found.unavailable or ''} (run `make probes`)")
    runner = Runner([t for t in found.targets if t.id in ids])
    try:
        yield runner
    finally:
        runner.close()
        found.close()


@contextmanager
def clean_runs(target: str):
    """A function running one program on ``target`` alone (every op sent, as a replayed case) and
    returning its trace, which must be ``ok``: what a module's ``run`` fixture yields."""
    with targets_runner((target,)) as runner:

        def run_program(program):
            trace = runner.run_one(program, every_target=True)[target]
            assert trace.status == "ok", trace.message
            return trace

        yield run_program


@pytest.fixture(scope="session")
def runner(all_targets):
    from harness.targets.runner import Runner

    r = Runner(all_targets.targets)
    yield r


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def redis_server(tmp_path):
    """A real ``redis-server`` on a free loopback port: ``(url, process)``. Fails (never skips)
    under CI when it is not installed (.ci/run installs it)."""
    yield from _redis_server(tmp_path)


@pytest.fixture(scope="module")
def module_redis_server(tmp_path_factory):
    """``redis_server`` shared by a module's tests (one campaign that several tests examine)."""
    yield from _redis_server(tmp_path_factory.mktemp("redis"))


def need(what: str, how: str) -> NoReturn:
    """Stops a test whose tool is missing: a skip, or on CI (``CI`` set) a failure, where a skip
    would pass as a success."""
    msg = f"{what} is not available ({how})"
    if os.environ.get("CI"):
        pytest.fail(msg)
    pytest.skip(msg)


def _redis_server(tmp_path):
    exe = shutil.which("redis-server")
    if exe is None:
        need("redis-server", "Debian/Ubuntu: apt-get install -y redis-server; macOS: brew install redis")
    import redis

    port = free_port()
    proc = subprocess.Popen(
        [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        client = redis.Redis(host="127.0.0.1", port=port)
        deadline = time.monotonic() + 20
        while True:
            try:
                client.ping()
                break
            except Exception:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail(f"redis-server did not come up on port {port}")
                time.sleep(0.1)
        yield f"redis://127.0.0.1:{port}/0", proc
    finally:
        if proc.poll() is None:
            proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def redis_url(redis_server):
    return redis_server[0]
