"""``aliasfuzz bisect`` refuses what it cannot bisect with one line and exit status 2 (issue 40,
fault 17): a reversed range, an unpublished release, a ``--cache`` that is a file. Every input is
refused before anything is built or downloaded: the releases are listed from a real local HTTP
server holding a sparse index file (``ALIASFUZZ_CRATES_INDEX``), and any other request would go
through a proxy that does not exist.

The tests of this subject that run in-process are in tests/unit/triage/test_bisect_hostile.py.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request

import pytest

from harness.targets.registry import RELEASE_PACKAGE
from tests.conftest import CASES, PY, free_port, run_cli

RELEASES = ["0.8.0", "0.9.1", "0.9.2", "0.10.0", "0.10.2", "0.11.1"]
CASE = str(CASES / "candle_clone_shares_storage.toml")


@pytest.fixture
def crates_index(tmp_path):
    """A sparse index of candle's releases served by a real ``http.server`` on a free port: the
    environment that sends ``bisect`` there and nowhere else."""
    crate = RELEASE_PACKAGE["candle"]
    where = tmp_path / "index" / crate[:2] / crate[2:4]
    where.mkdir(parents=True)
    (where / crate).write_text(
        "".join(json.dumps({"name": crate, "vers": v, "yanked": False}) + "\n" for v in RELEASES + ["0.12.0-alpha.1"])
    )
    port = free_port()
    server = subprocess.Popen(
        [PY, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(tmp_path / "index")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(f"{url}/{crate[:2]}/{crate[2:4]}/{crate}", timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    pytest.fail("the local index server did not come up")
                time.sleep(0.1)
        unreachable = f"http://127.0.0.1:{free_port()}"
        yield {
            "ALIASFUZZ_CRATES_INDEX": url,
            "https_proxy": unreachable,
            "http_proxy": unreachable,
            "HTTPS_PROXY": unreachable,
            "HTTP_PROXY": unreachable,
            "no_proxy": "127.0.0.1",
            "NO_PROXY": "127.0.0.1",
        }
    finally:
        server.terminate()
        server.wait(timeout=10)


def _one_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "internal error" not in r.stderr, r.stderr
    return lines[0]


@pytest.mark.parametrize(
    "versions,said",
    [
        ("0.11.1..0.9.1", "the range is reversed"),
        ("0.9.1,9.9.9", "9.9.9 is not a published release"),
        ("0.9.1..9.9.9", "9.9.9 is not a published release"),
    ],
)
def test_bisect_refuses_versions_it_cannot_bisect(tmp_path, crates_index, versions, said):
    line = _one_line(
        run_cli(
            "bisect",
            CASE,
            "--framework",
            "candle",
            "--versions",
            versions,
            "--cache",
            str(tmp_path / "cache"),
            env=crates_index,
            timeout=120,
        )
    )
    assert said in line and "--versions" in line, line
    assert not any((tmp_path / "cache").iterdir())  # nothing was built


def test_bisect_refuses_a_cache_that_is_a_file(tmp_path, crates_index):
    cache = tmp_path / "cache"
    cache.write_text("mine\n")
    line = _one_line(
        run_cli(
            "bisect",
            CASE,
            "--framework",
            "candle",
            "--versions",
            "0.9.1,0.11.1",
            "--cache",
            str(cache),
            env=crates_index,
            timeout=120,
        )
    )
    assert f"--cache {cache}: not a folder" in line, line
    assert cache.read_text() == "mine\n"
