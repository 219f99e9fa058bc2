"""``aliasfuzz matrix --out``: the folder is checked before any target starts, and a file that
``aliasfuzz matrix`` did not write is never overwritten.

The choice: ``matrix.md`` and ``matrix.html`` carry a marker line (``MARKER``, an HTML comment)
that only ``aliasfuzz matrix`` writes. ``--out`` may be a new or empty folder, or one whose pages
carry the marker (an earlier run, ``docs/matrix``); anything else is refused with one line, exit 2.
The TEST DOUBLE fake probe stands in as the ``candle`` binary so that a matrix is quick to build.

The tests here run in this process (the command line through ``run_cli_in_process``), as the
unit tier requires; those that need real processes are in tests/e2e/test_matrix_output.py.
"""

from __future__ import annotations

import time

import pytest

from tests.conftest import run_cli_in_process
from tests.support.fake_targets import fake_probe_dir
from tests.support.run_folders import one_line_error, snapshot


def matrix(tmp_path, out, timeout: float = 120):
    return run_cli_in_process(
        "matrix", "--targets", "candle", "--out", str(out), env=fake_probe_dir(tmp_path), timeout=timeout
    )


@pytest.mark.parametrize("page", ["matrix.md", "matrix.html"])
def test_a_users_own_page_is_never_overwritten(tmp_path, page):
    out = tmp_path / "mine"
    out.mkdir()
    (out / page).write_text("# My own notes on the matrix\n")
    before = snapshot(out)
    one_line_error(matrix(tmp_path, out), f"--out {out}", f"{page} was not written by aliasfuzz matrix")
    assert snapshot(out) == before


def test_a_users_folder_without_a_matrix_is_refused(tmp_path):
    out = tmp_path / "mine"
    (out / "cases").mkdir(parents=True)
    (out / "cases" / "clone--write.toml").write_text("# the user's own case\n")
    before = snapshot(out)
    one_line_error(matrix(tmp_path, out), f"--out {out}", "not empty and not a matrix folder")
    assert snapshot(out) == before


def test_a_page_that_is_no_regular_file_is_refused(tmp_path):
    out = tmp_path / "m"
    out.mkdir()
    (out / "matrix.md").symlink_to("/dev/null")
    one_line_error(matrix(tmp_path, out), f"--out {out}", "matrix.md: a character device")
    assert (out / "matrix.md").is_symlink()


@pytest.mark.parametrize("how", ["below-a-file", "a-file"])
def test_an_unwritable_out_is_refused_before_the_matrix_is_built(tmp_path, how):
    plain = tmp_path / "plain"
    plain.write_text("a regular file\n")
    out = plain / "m" if how == "below-a-file" else plain
    started = time.monotonic()
    r = matrix(tmp_path, out)
    one_line_error(r, f"--out {out}", "is not a folder" if how == "below-a-file" else "not a folder")
    assert r.stdout == ""
    assert time.monotonic() - started < 30
    assert plain.read_text() == "a regular file\n"
