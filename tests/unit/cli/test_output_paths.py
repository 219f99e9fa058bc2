"""Output paths the user names (``fuzz --junit``, ``bench --markdown``, ``minimize --out``) that
are not regular files: refused before any work, one line, exit 2, and left as they were.

Writing a file renames a new one over its path, so a device or a FIFO there would be replaced by a
regular file (``--junit /dev/null`` as root breaks the system). The tests never point aliasfuzz at
a real device: they use a FIFO made in the test's folder, and a link in it to ``/dev/null``, which
a regressed rename would replace (the link) without touching ``/dev/null`` itself.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from harness.files import atomic_write, output_file_problem
from tests.conftest import CASES, run_cli_in_process
from tests.support.fake_targets import fake_probe_dir
from tests.support.run_folders import one_line_error

CASE = CASES / "example_sgd_snapshots.toml"


def not_regular(tmp_path: Path, how: str) -> Path:
    """A path in ``tmp_path`` that is no regular file: a FIFO, or a link to the null device."""
    path = tmp_path / f"out-{how}"
    if how == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to(os.devnull)
    return path


def unchanged(path: Path, how: str) -> None:
    if how == "fifo":
        assert stat.S_ISFIFO(os.lstat(path).st_mode), "the FIFO was replaced"
    else:
        assert path.is_symlink() and os.readlink(path) == os.devnull, "the link was replaced"
        assert stat.S_ISCHR(os.stat(path).st_mode)


@pytest.mark.parametrize("how", ["fifo", "link-to-dev-null"])
def test_fuzz_junit_that_is_not_a_regular_file_is_refused_before_the_campaign(tmp_path, how):
    junit = not_regular(tmp_path, how)
    out = tmp_path / "run"
    r = run_cli_in_process(
        "fuzz",
        "--targets",
        "candle",
        "--profile",
        "quick",
        "--seed",
        "3",
        "--max-programs",
        "8",
        "--chunk-size",
        "8",
        "--confirm",
        "0",
        "--shrink-time",
        "2",
        "--no-report",
        "--out",
        str(out),
        "--junit",
        str(junit),
        env=fake_probe_dir(tmp_path),
        timeout=300,
    )
    one_line_error(r, f"--junit {junit}", "not a regular file")
    unchanged(junit, how)
    assert not out.exists(), "the campaign ran before the --junit path was checked"


@pytest.mark.parametrize("how", ["fifo", "link-to-dev-null"])
def test_bench_markdown_that_is_not_a_regular_file_is_refused_before_the_bench(tmp_path, how):
    page = not_regular(tmp_path, how)
    r = run_cli_in_process(
        "bench",
        "--targets",
        "candle",
        "--programs",
        "1",
        "--chunk-size",
        "1",
        "--spawn-programs",
        "1",
        "--length-programs",
        "1",
        "--rss-programs",
        "0",
        "--repeat",
        "1",
        "--no-workers",
        "--markdown",
        str(page),
        env=fake_probe_dir(tmp_path),
        timeout=300,
    )
    one_line_error(r, f"--markdown {page}", "not a regular file")
    assert r.stdout == "", "the bench ran before the --markdown path was checked"
    unchanged(page, how)


@pytest.mark.parametrize("how", ["fifo", "link-to-dev-null"])
def test_minimize_out_that_is_not_a_regular_file_is_refused(tmp_path, how):
    out = not_regular(tmp_path, how)
    r = run_cli_in_process("minimize", str(CASE), "--targets", "torch:cpu", "--out", str(out), timeout=300)
    one_line_error(r, str(out), "--out", "not a regular file")
    unchanged(out, how)


@pytest.mark.parametrize("how", ["fifo", "link-to-dev-null"])
def test_atomic_write_never_replaces_what_is_not_a_regular_file(tmp_path, how):
    """The write itself refuses too, whichever command reaches it unchecked."""
    path = not_regular(tmp_path, how)
    with pytest.raises(OSError, match="not a regular file"):
        atomic_write(path, "text")
    unchanged(path, how)
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name], "a temporary file was left"


def test_output_file_problem_accepts_a_new_or_regular_file_and_names_what_it_refuses(tmp_path):
    regular = tmp_path / "old.xml"
    regular.write_text("old")
    assert output_file_problem(regular) is None
    assert output_file_problem(tmp_path / "new.xml") is None
    assert "a FIFO" in output_file_problem(not_regular(tmp_path, "fifo"))
    assert "a character device" in output_file_problem(not_regular(tmp_path, "link-to-dev-null"))
    assert "a folder" in output_file_problem(tmp_path)
    assert "does not exist" in output_file_problem(tmp_path / "missing" / "x.xml")
